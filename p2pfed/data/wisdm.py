"""WISDM activity recognition (Kwapisz, Weiss, Moore, SensorKDD-10) as a
federation: one device per user, the natural non-IID split."""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .dataset import FederatedDataset
from .devices import devices_by_owner
from .wisdm_arrays import CLASS_NAMES, arrays_from_arff, arrays_from_npz
from .wisdm_raw import read_wisdm_raw, window_means

PACKAGED_FILE = "wisdm_v1.1_transformed.npz"


def select_users(available: np.ndarray, users: Iterable[int] | None, source: object) -> list[int]:
    present = sorted(int(u) for u in np.unique(available))
    if users is None:
        return present
    chosen = sorted({int(u) for u in users})
    unknown = [u for u in chosen if u not in present]
    if unknown:
        raise ValueError(f"unknown WISDM user id(s) {unknown} in {source}; "
                         f"available: {present[0]}..{present[-1]} ({len(present)} users)")
    return chosen


def select_features(available: np.ndarray, features: Sequence[str] | None, source: object) -> list[int]:
    """Column indices of ``features`` (in the order given) among the file's feature names;
    None: every column."""
    names = [str(n) for n in available]
    if features is None:
        return list(range(len(names)))
    chosen = [str(f) for f in features]
    twice = sorted({f for f in chosen if chosen.count(f) > 1})
    if twice:
        raise ValueError(f"feature(s) {twice} named twice")
    unknown = [f for f in chosen if f not in names]
    if unknown:
        raise ValueError(f"unknown WISDM feature(s) {unknown} in {source}; available: {', '.join(names)}")
    return [names.index(f) for f in chosen]


def load_arrays(path: str | Path | None) -> tuple[dict[str, np.ndarray], object]:
    """The WISDM arrays of ``path`` (.arff or .npz; None: the packaged file) and where they came from."""
    if path is None:
        ref = resources.files("p2pfed.data").joinpath("files", PACKAGED_FILE)
        with resources.as_file(ref) as file:
            return arrays_from_npz(file), file
    path = Path(path)
    if path.suffix.lower() == ".arff":
        return arrays_from_arff(path), path
    if path.suffix.lower() == ".npz":
        return arrays_from_npz(path), path
    raise ValueError(f"{path}: expected a .arff or .npz file")


def load_wisdm(*, test_fraction: float = 0.2, seed: int = 0, scaling: str = "device",
               users: Iterable[int] | None = None, train_fraction: float = 1.0,
               path: str | Path | None = None,
               features: Sequence[str] | None = None) -> FederatedDataset:
    """Load WISDM v1.1 transformed (43 features, 6 classes), one device per user.

    Devices are ordered by user id; each is split (stratified) and scaled
    with its own training statistics (``scaling="device"``) or the
    federation's (``"federation"``). Missing PEAK values are imputed with
    the device's training mean. ``features`` keeps those columns only, in
    that order (e.g. ``["XAVG", "YAVG", "ZAVG"]``, the per-window axis means).
    """
    arrays, source = load_arrays(path)
    chosen = select_users(arrays["user"], users, source)
    columns = select_features(arrays["feature_names"], features, source)
    x = arrays["x"][:, columns]
    devices = devices_by_owner(x, arrays["label"].astype(np.int64), arrays["user"],
                               chosen, "wisdm-user-{}", test_fraction=test_fraction,
                               seed=seed, scaling=scaling, train_fraction=train_fraction)
    return FederatedDataset("wisdm", x.shape[1], len(arrays["class_names"]),
                            [str(c) for c in arrays["class_names"]], devices)


def load_wisdm_raw(path: str | Path, *, window_s: float = 1.0, rate_hz: int = 20,
                   test_fraction: float = 0.2, seed: int = 0,
                   scaling: str = "device", train_fraction: float = 1.0) -> FederatedDataset:
    """Load the raw 20 Hz WISDM file, windowed as in FedSub (3 mean features).

    A window holds round(window_s * rate_hz) consecutive samples of one
    user and activity; incomplete trailing windows are dropped.
    """
    window = int(round(window_s * rate_hz))
    x, user, label = window_means(read_wisdm_raw(path), window)
    chosen = sorted(int(u) for u in np.unique(user))
    devices = devices_by_owner(x, label, user, chosen, "wisdm-user-{}",
                               test_fraction=test_fraction, seed=seed, scaling=scaling,
                               train_fraction=train_fraction)
    return FederatedDataset("wisdm-raw", 3, len(CLASS_NAMES), list(CLASS_NAMES), devices)
