"""Synthetic federation with planted per-class device groups.

For each class, devices are partitioned into latent groups; devices in one
group draw that class from the same Gaussian, and the partition is drawn
independently per class. This gives ground truth for methods that should
discover "who is similar to whom, for which class".
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .dataset import FederatedDataset
from .devices import device_seed, make_device


def _groups_per_class(groups_per_class: int | Sequence[int], num_classes: int) -> list[int]:
    if isinstance(groups_per_class, (int, np.integer)):
        counts = [int(groups_per_class)] * num_classes
    else:
        counts = [int(g) for g in groups_per_class]
        if len(counts) != num_classes:
            raise ValueError(f"groups_per_class has {len(counts)} entries, "
                             f"num_classes is {num_classes}")
    if min(counts) < 1:
        raise ValueError(f"groups_per_class must be >= 1, got {counts}")
    return counts


def _holdings(num_devices: int, num_classes: int, classes_per_device: int | None,
              rng: np.random.Generator) -> np.ndarray:
    """Boolean (devices, classes): which device holds which class."""
    if classes_per_device is None:
        return np.ones((num_devices, num_classes), dtype=bool)
    if not 1 <= classes_per_device <= num_classes:
        raise ValueError(f"classes_per_device must be in 1..{num_classes}, "
                         f"got {classes_per_device}")
    held = np.zeros((num_devices, num_classes), dtype=bool)
    for d in range(num_devices):
        held[d, rng.choice(num_classes, size=classes_per_device, replace=False)] = True
    return held


def _assign_groups(held: np.ndarray, counts: list[int], rng: np.random.Generator, shared: bool = False) -> np.ndarray:
    """Balanced random group per (device, class); -1 where the class is absent. ``shared``: one
    group per device (a user type) for every class it holds."""
    groups = np.full(held.shape, -1, dtype=np.int64)
    if shared:
        if len(set(counts)) != 1:
            raise ValueError(f"shared_groups needs the same number of groups for every class, got {counts}")
        kind = rng.permutation(np.arange(held.shape[0]) % counts[0])
        return np.where(held, kind[:, None], -1).astype(np.int64)
    for c, g in enumerate(counts):
        holders = np.flatnonzero(held[:, c])
        groups[holders, c] = rng.permutation(np.arange(len(holders)) % g)
    return groups


def make_synthetic(*, num_devices: int = 12, num_classes: int = 4, num_features: int = 16,
                   groups_per_class: int | Sequence[int] = 3, samples_per_class: int = 40,
                   classes_per_device: int | None = None, separation: float = 4.0,
                   noise: float = 1.0, test_fraction: float = 0.25,
                   seed: int = 0, train_fraction: float = 1.0, shared_groups: bool = False) -> FederatedDataset:
    """Gaussian data whose class-c mean depends on the device's latent group for c.

    Each (class, group) mean is a random direction of length `separation`;
    samples add isotropic noise of std `noise`. Features are not rescaled,
    so the planted geometry is preserved. `groups` holds the ground truth. Groups are drawn per
    class (a device's group-mates differ from class to class) or, with `shared_groups`, once per
    device for all its classes (user types: the same devices are alike in every class).
    """
    if num_devices < 1 or num_classes < 1 or num_features < 1 or samples_per_class < 1:
        raise ValueError("num_devices, num_classes, num_features, samples_per_class must be >= 1")
    counts = _groups_per_class(groups_per_class, num_classes)
    rng = np.random.default_rng(seed)
    held = _holdings(num_devices, num_classes, classes_per_device, rng)
    groups = _assign_groups(held, counts, rng, shared_groups)
    means = []
    for g in counts:
        direction = rng.normal(size=(g, num_features))
        means.append(separation * direction / np.linalg.norm(direction, axis=1, keepdims=True))
    devices = []
    for d in range(num_devices):
        xs, ys = [], []
        for c in np.flatnonzero(held[d]):
            mu = means[c][groups[d, c]]
            xs.append(mu + noise * rng.normal(size=(samples_per_class, num_features)))
            ys.append(np.full(samples_per_class, c, dtype=np.int64))
        devices.append(make_device(d, f"synthetic-{d}", np.concatenate(xs), np.concatenate(ys),
                                   test_fraction=test_fraction, rng=device_seed(seed, d),
                                   scaling="none", train_fraction=train_fraction))
    return FederatedDataset("synthetic", num_features, num_classes,
                            [f"class-{c}" for c in range(num_classes)], devices, groups)
