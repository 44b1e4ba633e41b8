"""WISDM v1.1 transformed data as plain arrays (the packaged npz's schema).

Kept separate from the loader so the build script and `load_wisdm(path=...arff)`
share one conversion.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .arff import read_arff
from .npz import load_npz

#: Fixed label order (label id = position). Matches the ARFF's declared order.
CLASS_NAMES: tuple[str, ...] = ("Walking", "Jogging", "Upstairs", "Downstairs", "Sitting", "Standing")

_NON_FEATURES = ("UNIQUE_ID", "user", "class")


def arrays_from_arff(path: str | Path) -> dict[str, np.ndarray]:
    """Convert the lab's ARFF into the arrays stored in the packaged npz.

    Missing values ('?', only in the XPEAK/YPEAK/ZPEAK columns) stay NaN;
    they are imputed later from each device's own training data.
    """
    table = read_arff(path)
    for required in _NON_FEATURES:
        if required not in table.columns:
            raise ValueError(f"{path}: attribute {required!r} missing from the header")
    feature_names = [n for n in table.names if n not in _NON_FEATURES]
    x = np.stack([table.columns[n] for n in feature_names], axis=1).astype(np.float32)
    user = table.columns["user"].astype(np.int16)
    index = {name: i for i, name in enumerate(CLASS_NAMES)}
    unknown = sorted(set(table.columns["class"]) - set(index))
    if unknown:
        raise ValueError(f"{path}: unknown class value(s) {unknown}; expected {list(CLASS_NAMES)}")
    label = np.array([index[c] for c in table.columns["class"]], dtype=np.int8)
    return {
        "x": x,
        "user": user,
        "label": label,
        "feature_names": np.array(feature_names, dtype=str),
        "class_names": np.array(CLASS_NAMES, dtype=str),
    }


def arrays_from_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Load and validate an npz written by `build_wisdm` (no pickle allowed)."""
    arrays = load_npz(path, ("x", "user", "label", "feature_names", "class_names"))
    if arrays["x"].ndim != 2 or arrays["x"].dtype.kind not in "fiu":
        raise ValueError(f"{path}: array 'x' must be a 2-d numeric table, got {arrays['x'].dtype} "
                         f"of shape {arrays['x'].shape}")
    n = len(arrays["x"])
    for key in ("user", "label"):
        if len(arrays[key]) != n:
            raise ValueError(f"{path}: array {key!r} has {len(arrays[key])} rows, x has {n}")
    if arrays["x"].shape[1] != len(arrays["feature_names"]):
        raise ValueError(f"{path}: x has {arrays['x'].shape[1]} columns but "
                         f"{len(arrays['feature_names'])} feature names")
    return arrays
