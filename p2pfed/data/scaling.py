"""Feature standardisation and missing-value imputation without test leakage.

Statistics come from training splits only: test data must never influence preprocessing.
``device`` scaling uses one device's training split alone (no peer sees anything but its own
data); ``federation`` scaling uses every device's training split, combined from per-device
sufficient statistics as a federated mean/variance computes them (see ``federation_statistics``).
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

SCALINGS = ("device", "federation", "none")
_MIN_STD = 1e-8


def check_scaling(scaling: str) -> None:
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {SCALINGS}, got {scaling!r}")


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
    scaling="federation" needs every device's data: impute here with ``scaling="none"``, then
    scale all devices together with ``federation_statistics`` and ``standardise``.
    """
    check_scaling(scaling)
    if scaling == "federation":
        raise ValueError("scaling 'federation' needs every device's training data: preprocess each "
                         "device with scaling='none', then apply federation_statistics to them all")
    x_train = np.asarray(x_train, dtype=np.float64)
    x_test = np.asarray(x_test, dtype=np.float64)
    mean, std = _train_stats(x_train)
    x_train = np.where(np.isnan(x_train), mean, x_train)
    x_test = np.where(np.isnan(x_test), mean, x_test)
    if scaling == "device":
        x_train = (x_train - mean) / std
        x_test = (x_test - mean) / std
    return x_train.astype(np.float32), x_test.astype(np.float32)


def sufficient_statistics(x_train: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """What one device contributes to the federation's statistics: its number of training
    examples, and the per-feature sums and sums of squares of its (imputed) training data, in
    float64. Nothing else about the data leaves the device."""
    x = np.asarray(x_train, dtype=np.float64)
    return len(x), x.sum(axis=0), np.square(x).sum(axis=0)


def federation_statistics(train_sets: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and standard deviation of every device's training data pooled.

    Each device sends ``sufficient_statistics`` of its training split (n_i, Σx, Σx²); their
    element-wise sums give the pooled mean Σx / n and (population) variance Σx² / n − mean², the
    statistics a scaler fitted on the pooled training data would have (scikit-learn's
    ``StandardScaler``). Test splits take no part. Zero-variance features keep std 1.

    Notes
    -----
    In a deployment this is one secure-aggregation round before training (each device masks its
    count, sums and sums of squares; the federation learns only their totals), a global step the
    ``device`` scaling avoids. The simulator computes the same sums directly. Sums of squares lose precision
    when a feature's mean is many orders of magnitude above its spread (relative error about
    1e-16 · mean² / variance); the variance is floored at 0.
    """
    stats = [sufficient_statistics(x) for x in train_sets]
    n = sum(s[0] for s in stats)
    if n == 0:
        raise ValueError("federation scaling needs at least one training example")
    total = np.sum([s[1] for s in stats], axis=0)
    squares = np.sum([s[2] for s in stats], axis=0)
    mean = total / n
    var = np.maximum(squares / n - np.square(mean), 0.0)
    std = np.sqrt(var)
    constant = std <= _MIN_STD * np.maximum(1.0, np.abs(mean))   # rounding left in Σx² / n − mean²
    return mean, np.where(constant, 1.0, std)


def standardise(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """``(x - mean) / std`` as float32 (computed in float64)."""
    return ((np.asarray(x, dtype=np.float64) - mean) / std).astype(np.float32)
