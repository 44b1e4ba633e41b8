"""Per-device stratified train/test split that never crashes on rare classes."""
from __future__ import annotations

import numpy as np

from p2pfed.data.stratified import stratified_train_test_split


def as_generator(seed: int | np.random.Generator) -> np.random.Generator:
    """Accept either an int seed or a ready Generator."""
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _per_class_split(y: np.ndarray, test_fraction: float, rng: np.random.Generator):
    """Fallback: round each class's test share, keeping at least one train sample."""
    train, test = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_test = min(int(round(len(idx) * test_fraction)), len(idx) - 1)
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.concatenate(train), np.concatenate(test)


def keep_per_class(y: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of a random ``fraction`` of each class's examples (at least one per class),
    so a device with less data still holds every class it had: the data-fraction experiments
    change how much a device knows, not which classes it knows."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    y = np.asarray(y)
    if fraction == 1.0:
        return np.arange(len(y))
    kept = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        n = max(1, int(round(len(idx) * fraction)))
        kept.append(rng.choice(idx, size=n, replace=False))
    return np.sort(np.concatenate(kept)).astype(np.int64) if kept else np.arange(0)


def stratified_split(y: np.ndarray, test_fraction: float = 0.2,
                     seed: int | np.random.Generator = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return sorted (train_idx, test_idx) with class proportions preserved.

    Classes with a single example go to train (they cannot be stratified);
    the rest are split as scikit-learn's ``train_test_split(stratify=...)`` splits them, or by
    per-class rounding where it refuses (too few examples per class).
    """
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    y = np.asarray(y)
    rng = as_generator(seed)
    if test_fraction == 0.0 or len(y) == 0:
        return np.arange(len(y)), np.array([], dtype=np.int64)
    classes, counts = np.unique(y, return_counts=True)
    single = np.isin(y, classes[counts == 1])
    rest = np.flatnonzero(~single)
    if len(rest) == 0:
        return np.arange(len(y)), np.array([], dtype=np.int64)
    try:
        tr_local, te_local = stratified_train_test_split(y[rest], test_fraction, int(rng.integers(2**31 - 1)))
        tr, te = rest[tr_local], rest[te_local]
    except ValueError:
        tr_local, te_local = _per_class_split(y[rest], test_fraction, rng)
        tr, te = rest[tr_local], rest[te_local]
    train = np.sort(np.concatenate([tr, np.flatnonzero(single)])).astype(np.int64)
    return train, np.sort(te).astype(np.int64)
