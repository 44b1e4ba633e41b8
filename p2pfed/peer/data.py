"""A peer's own data (CSV or NPZ), checked against the federation's model before training.

NPZ files are read with ``allow_pickle=False``; CSV files hold numeric feature columns and an
integer ``label`` as the last column (a header row is skipped). Features are scaled with the
device's own training statistics, as the scenario loaders do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from p2pfed.data import DeviceData
from p2pfed.data.devices import device_seed, make_device
from p2pfed.data.scaling import preprocess

NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


class DataFileError(ValueError):
    """A data file that cannot be used (names the file and what is wrong)."""


def load_own_data(path: Path, device_id: int, *, num_features: int, num_classes: int,
                  test_fraction: float, seed: int) -> DeviceData:
    """One device's train/test data from ``path``, fitting ``num_features`` and ``num_classes``."""
    if path.suffix.lower() == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                missing = [k for k in NPZ_KEYS if k not in z.files]
                if missing:
                    raise DataFileError(f"{path}: missing arrays {missing} (need {list(NPZ_KEYS)})")
                x_tr, y_tr, x_te, y_te = (np.asarray(z[k]) for k in NPZ_KEYS)
        except (OSError, ValueError) as exc:
            if isinstance(exc, DataFileError):
                raise
            raise DataFileError(f"{path}: not a readable .npz without objects ({exc})") from None
        _check(path, x_tr, y_tr, num_features, num_classes, "train")
        _check(path, x_te, y_te, num_features, num_classes, "test")
        x_tr, x_te = preprocess(x_tr.astype(np.float32), x_te.astype(np.float32), "device")
        return DeviceData(device_id, path.stem, x_tr, y_tr.astype(np.int64), x_te, y_te.astype(np.int64))
    if path.suffix.lower() == ".csv":
        try:
            table = np.genfromtxt(path, delimiter=",", dtype=np.float64, skip_header=_header_rows(path))
        except (OSError, ValueError) as exc:
            raise DataFileError(f"{path}: cannot read CSV ({exc})") from None
        table = np.atleast_2d(table)
        x, y = table[:, :-1], table[:, -1]
        if np.any(y != np.round(y)):
            raise DataFileError(f"{path}: the last column (label) must hold integer class ids")
        y = y.astype(np.int64)
        _check(path, x, y, num_features, num_classes, "all")
        return make_device(device_id, path.stem, x.astype(np.float32), y, test_fraction=test_fraction,
                           rng=device_seed(seed, device_id), scaling="device")
    raise DataFileError(f"{path}: unknown data format (use .csv or .npz)")


def _header_rows(path: Path) -> int:
    with path.open() as fh:
        first = fh.readline()
    try:
        [float(v) for v in first.split(",")]
        return 0
    except ValueError:
        return 1


def _check(path: Path, x: np.ndarray, y: np.ndarray, num_features: int, num_classes: int,
           part: str) -> None:
    if x.ndim != 2 or x.shape[1] != num_features:
        raise DataFileError(f"{path}: {part} features have shape {x.shape}, the model needs "
                            f"(n, {num_features})")
    if y.shape != (x.shape[0],):
        raise DataFileError(f"{path}: {part} labels have shape {y.shape}, expected ({x.shape[0]},)")
    if x.dtype.kind not in "fiu" or y.dtype.kind not in "iu":
        raise DataFileError(f"{path}: {part} features must be numeric and labels integers")
    if not np.all(np.isfinite(x)):
        raise DataFileError(f"{path}: {part} features hold NaN or infinite values")
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise DataFileError(f"{path}: {part} labels must be class ids in 0..{num_classes - 1}")
