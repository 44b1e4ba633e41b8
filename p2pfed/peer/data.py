"""A peer's own data (CSV or NPZ), checked against the federation's model before training.

NPZ files are read with ``allow_pickle=False``; CSV files hold numeric feature columns and an
integer ``label`` as the last column (a header row is skipped). Features are scaled with the
device's own training statistics, as the scenario loaders do.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from p2pfed.data import DeviceData
from p2pfed.data.devices import device_seed, make_device
from p2pfed.data.npz import NpzFileError, load_npz
from p2pfed.data.scaling import preprocess

NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


class DataFileError(ValueError):
    """A data file that cannot be used (names the file and what is wrong)."""


def load_own_data(path: Path, device_id: int, *, num_features: int, num_classes: int,
                  test_fraction: float, seed: int) -> DeviceData:
    """One device's train/test data from ``path``, fitting ``num_features`` and ``num_classes``."""
    if path.suffix.lower() == ".npz":
        try:
            arrays = load_npz(path, NPZ_KEYS)
        except NpzFileError as exc:
            raise DataFileError(str(exc)) from None
        x_tr, y_tr, x_te, y_te = (arrays[k] for k in NPZ_KEYS)
        _check(path, x_tr, y_tr, num_features, num_classes, "train")
        _check(path, x_te, y_te, num_features, num_classes, "test")
        x_tr, x_te = preprocess(x_tr.astype(np.float32), x_te.astype(np.float32), "device")
        return DeviceData(device_id, path.stem, x_tr, y_tr.astype(np.int64), x_te, y_te.astype(np.int64))
    if path.suffix.lower() == ".csv":
        x, y = read_csv_table(path)
        _check(path, x, y, num_features, num_classes, "all")
        return make_device(device_id, path.stem, x.astype(np.float32), y, test_fraction=test_fraction,
                           rng=device_seed(seed, device_id), scaling="device")
    raise DataFileError(f"{path}: unknown data format (use .csv or .npz)")


def read_csv_table(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(features, integer labels) from a CSV whose last column is the label; a header row is
    skipped. Every problem names the file and its line."""
    rows: list[list[float]] = []
    header_seen = False
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            for row in reader:
                if not any(cell.strip() for cell in row):
                    continue
                where = f"{path}:{reader.line_num}"
                try:
                    values = [float(cell) for cell in row]
                except ValueError:
                    if rows or header_seen:
                        raise DataFileError(f"{where}: every cell must be a number, got {row!r:.120}") from None
                    header_seen = True
                    continue
                if len(values) < 2:
                    raise DataFileError(f"{where}: needs feature columns and a label column, got {len(values)}")
                if rows and len(values) != len(rows[0]):
                    raise DataFileError(f"{where}: {len(values)} columns, earlier rows have {len(rows[0])}")
                if not all(math.isfinite(v) for v in values):
                    raise DataFileError(f"{where}: holds NaN or infinite values")
                if values[-1] != int(values[-1]):
                    raise DataFileError(f"{where}: the last column (label) must be an integer class id, "
                                        f"got {row[-1]!r}")
                rows.append(values)
    except UnicodeDecodeError:
        raise DataFileError(f"{path}: not a text (UTF-8) CSV file") from None
    except csv.Error as exc:
        raise DataFileError(f"{path}: malformed CSV: {exc}") from None
    except OSError as exc:
        raise DataFileError(f"{path}: cannot read CSV: {exc.strerror}") from None
    if not rows:
        raise DataFileError(f"{path}: holds no data rows")
    table = np.asarray(rows, dtype=np.float64)
    return table[:, :-1], table[:, -1].astype(np.int64)


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
