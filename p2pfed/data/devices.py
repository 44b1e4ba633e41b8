"""Turn pooled arrays plus an owner column into split, scaled DeviceData."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from .dataset import DeviceData
from .scaling import check_scaling, federation_statistics, preprocess, standardise
from .split import keep_per_class, stratified_split


def device_seed(seed: int, key: int) -> np.random.Generator:
    """Per-device RNG: a device's split depends on (seed, key) only, not on
    which other devices were selected."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(key)]))


def make_device(device_id: int, name: str, x: np.ndarray, y: np.ndarray, *,
                test_fraction: float, rng: np.random.Generator,
                scaling: str, train_fraction: float = 1.0) -> DeviceData:
    """Split one device's examples and preprocess them with train statistics.

    ``train_fraction`` < 1 keeps that share of each class's training examples (drawn after the
    split, so the test set is the same at every fraction) and scales with the kept ones only.
    ``scaling="federation"`` only imputes here; ``scale_federation`` scales the devices together."""
    check_scaling(scaling)
    train, test = stratified_split(y, test_fraction, rng)
    train = train[keep_per_class(y[train], train_fraction, rng)]
    x_train, x_test = preprocess(x[train], x[test], "none" if scaling == "federation" else scaling)
    return DeviceData(device_id, name, x_train, y[train].astype(np.int64),
                      x_test, y[test].astype(np.int64))


def devices_by_owner(x: np.ndarray, y: np.ndarray, owner: np.ndarray,
                     owners: Sequence[int], name_format: str, *, test_fraction: float,
                     seed: int, scaling: str, train_fraction: float = 1.0) -> list[DeviceData]:
    """One device per entry of `owners`, in that order."""
    devices = []
    for device_id, key in enumerate(owners):
        mask = owner == key
        devices.append(make_device(device_id, name_format.format(key), x[mask], y[mask],
                                   test_fraction=test_fraction, rng=device_seed(seed, key),
                                   scaling=scaling, train_fraction=train_fraction))
    return scale_federation(devices) if scaling == "federation" else devices


def devices_from_parts(x: np.ndarray, y: np.ndarray, parts: Sequence[np.ndarray],
                       names: Sequence[str], *, test_fraction: float, seed: int,
                       scaling: str, train_fraction: float = 1.0) -> list[DeviceData]:
    """One device per index array in ``parts`` (device i's split drawn from (seed, i))."""
    devices = [make_device(i, name, x[idx], y[idx], test_fraction=test_fraction,
                           rng=device_seed(seed, i), scaling=scaling, train_fraction=train_fraction)
               for i, (idx, name) in enumerate(zip(parts, names))]
    return scale_federation(devices) if scaling == "federation" else devices


def scale_federation(devices: Sequence[DeviceData]) -> list[DeviceData]:
    """The devices (imputed, unscaled) standardised with the federation's pooled training
    statistics (``scaling.federation_statistics``: one secure-aggregation round before training
    in a deployment); their test splits are scaled with the same statistics and never fitted."""
    mean, std = federation_statistics([d.x_train for d in devices])
    return [replace(d, x_train=standardise(d.x_train, mean, std), x_test=standardise(d.x_test, mean, std))
            for d in devices]


def unsplittable(devices: Sequence[DeviceData]) -> list[DeviceData]:
    """Devices whose split left train or test empty (no class with two examples)."""
    return [d for d in devices if d.num_train == 0 or d.num_test == 0]
