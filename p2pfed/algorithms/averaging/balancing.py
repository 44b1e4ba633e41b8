"""Class balancing of one device's training set with SMOTE (imbalanced-learn, the ``smote``
extra), for FedHome."""

from __future__ import annotations

import numpy as np

from p2pfed.extras import Requirement

SMOTE = Requirement("imblearn.over_sampling", package="imbalanced-learn", extra="smote")


def smote_balance(x: np.ndarray, y: np.ndarray, k_neighbors: int,
                  seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Oversample every class present up to the largest one with SMOTE (Chawla et al., 2002).

    SMOTE interpolates between a sample and one of its ``k`` nearest same-class neighbours, so
    ``k`` is lowered to the smallest class size minus one, and a class with a single sample is
    duplicated first (its synthetic samples are then copies of it). Classes absent from the
    device stay absent: there is nothing to interpolate from. The original samples come first.
    """
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2 or counts.min() == counts.max():
        return x, y
    lone = np.flatnonzero(np.isin(y, classes[counts == 1]))
    if len(lone):
        x, y = np.concatenate([x, x[lone]]), np.concatenate([y, y[lone]])
        counts = np.maximum(counts, 2)
    k = max(1, min(k_neighbors, int(counts.min()) - 1))
    smote = SMOTE.load(needed_by="fedhome").SMOTE
    xs, ys = smote(k_neighbors=k, random_state=seed).fit_resample(x, y)
    return np.asarray(xs, dtype=x.dtype), np.asarray(ys, dtype=y.dtype)
