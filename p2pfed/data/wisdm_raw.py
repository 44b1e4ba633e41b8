"""Reader and windowing for the raw WISDM 20 Hz accelerometer format.

Format: `user,activity,timestamp,x,y,z;` per record. Windowing follows the
FedSub preprocessing: non-overlapping windows of consecutive samples of one
user and activity (ordered by timestamp), each reduced to its per-axis means.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .wisdm_arrays import CLASS_NAMES

_CANONICAL = {name.lower(): i for i, name in enumerate(CLASS_NAMES)}


@dataclass
class RawRecords:
    """Parsed raw samples plus the lines that were skipped."""

    user: np.ndarray  # int64
    label: np.ndarray  # int64, index into CLASS_NAMES
    timestamp: np.ndarray  # int64
    xyz: np.ndarray  # float64 (n, 3)
    skipped: list[tuple[int, str]]


def _parse_record(record: str) -> tuple[int, int, int, float, float, float]:
    fields = [f.strip() for f in record.split(",")]
    if len(fields) != 6:
        raise ValueError(f"expected 6 fields, found {len(fields)}")
    try:
        user = int(fields[0])
    except ValueError:
        raise ValueError(f"user {fields[0]!r} is not an integer") from None
    label = _CANONICAL.get(fields[1].lower())
    if label is None:
        raise ValueError(f"unknown activity {fields[1]!r}")
    try:
        timestamp = int(float(fields[2]))
    except (ValueError, OverflowError):
        raise ValueError(f"timestamp {fields[2]!r} is not a number") from None
    try:
        x, y, z = (float(v) for v in fields[3:])
    except ValueError:
        raise ValueError(f"acceleration {fields[3:]} is not numeric") from None
    if not all(np.isfinite((x, y, z))):
        raise ValueError("acceleration is not finite")
    return user, label, timestamp, x, y, z


def read_wisdm_raw(path: str | Path, *, warn: bool = True) -> RawRecords:
    """Parse a raw WISDM file; blank or malformed lines are skipped and reported."""
    path = Path(path)
    parsed: list[tuple] = []
    skipped: list[tuple[int, str]] = []
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        for lineno, line in enumerate(handle, start=1):
            records = [r for r in line.strip().split(";") if r.strip()]
            if not records:
                skipped.append((lineno, "empty line"))
                continue
            for record in records:
                try:
                    parsed.append(_parse_record(record))
                except ValueError as err:
                    skipped.append((lineno, str(err)))
    if skipped and warn:
        shown = "; ".join(f"line {n}: {why}" for n, why in skipped[:20])
        more = f" (and {len(skipped) - 20} more)" if len(skipped) > 20 else ""
        warnings.warn(f"{path}: skipped {len(skipped)} record(s): {shown}{more}", stacklevel=2)
    if not parsed:
        raise ValueError(f"{path}: no valid records")
    cols = list(zip(*parsed))
    return RawRecords(np.array(cols[0], dtype=np.int64), np.array(cols[1], dtype=np.int64),
                      np.array(cols[2], dtype=np.int64),
                      np.stack([np.array(c, dtype=np.float64) for c in cols[3:]], axis=1),
                      skipped)


def window_means(records: RawRecords, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Non-overlapping windows per (user, activity) → (x means (n,3), user, label).

    Samples are ordered by timestamp (stable, so ties keep file order);
    incomplete trailing windows are dropped.
    """
    if window < 1:
        raise ValueError(f"window must hold at least one sample, got {window}")
    xs, users, labels = [], [], []
    keys = np.unique(np.stack([records.user, records.label], axis=1), axis=0)
    for user, label in keys:
        idx = np.flatnonzero((records.user == user) & (records.label == label))
        idx = idx[np.argsort(records.timestamp[idx], kind="stable")]
        n_windows = len(idx) // window
        if n_windows == 0:
            continue
        block = records.xyz[idx[: n_windows * window]].reshape(n_windows, window, 3)
        xs.append(block.mean(axis=1))
        users.append(np.full(n_windows, user, dtype=np.int64))
        labels.append(np.full(n_windows, label, dtype=np.int64))
    if not xs:
        raise ValueError(f"no complete window of {window} samples in the data")
    return np.concatenate(xs).astype(np.float32), np.concatenate(users), np.concatenate(labels)
