"""Feature standardisation and missing-value imputation without test leakage.

Statistics come from one device's training split only: in a serverless
federation no peer can see global statistics, and test data must never
influence preprocessing.
"""
from __future__ import annotations

import warnings

import numpy as np

SCALINGS = ("device", "none")
_MIN_STD = 1e-8


def _train_stats(x_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NaN-aware column mean/std of the training data; all-NaN columns get 0/1."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN or empty columns
        mean = np.nanmean(x_train, axis=0) if len(x_train) else np.zeros(x_train.shape[1])
        std = np.nanstd(x_train, axis=0) if len(x_train) else np.ones(x_train.shape[1])
    mean = np.where(np.isfinite(mean), mean, 0.0)
    std = np.where(np.isfinite(std) & (std > _MIN_STD), std, 1.0)  # guard zero std
    return mean, std


def preprocess(x_train: np.ndarray, x_test: np.ndarray,
               scaling: str = "device") -> tuple[np.ndarray, np.ndarray]:
    """Impute NaNs with the train mean, then scale; returns float32 copies.

    scaling="device": subtract train mean, divide by train std (per feature).
    scaling="none": only impute missing values.
    """
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {SCALINGS}, got {scaling!r}")
    x_train = np.asarray(x_train, dtype=np.float64)
    x_test = np.asarray(x_test, dtype=np.float64)
    mean, std = _train_stats(x_train)
    x_train = np.where(np.isnan(x_train), mean, x_train)
    x_test = np.where(np.isnan(x_test), mean, x_test)
    if scaling == "device":
        x_train = (x_train - mean) / std
        x_test = (x_test - mean) / std
    return x_train.astype(np.float32), x_test.astype(np.float32)
