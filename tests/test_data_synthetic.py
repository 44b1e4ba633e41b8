"""Tests for the synthetic federation's planted per-class group structure."""
from __future__ import annotations

import numpy as np
import pytest

from p2pfed.data import make_synthetic


def _canonical(labels: np.ndarray) -> tuple:
    """Relabel a partition by first appearance so equal partitions compare equal."""
    mapping: dict[int, int] = {}
    return tuple(mapping.setdefault(int(v), len(mapping)) if v >= 0 else -1 for v in labels)


def _class_means(data, c):
    return {d.device_id: d.x_train[d.y_train == c].mean(axis=0)
            for d in data.devices if np.any(d.y_train == c)}


def test_deterministic_and_seed_sensitive():
    a, b, c = make_synthetic(seed=4), make_synthetic(seed=4), make_synthetic(seed=5)
    np.testing.assert_array_equal(a.groups, b.groups)
    for da, db in zip(a.devices, b.devices):
        np.testing.assert_array_equal(da.x_train, db.x_train)
        np.testing.assert_array_equal(da.y_test, db.y_test)
    assert not np.array_equal(a.devices[0].x_train, c.devices[0].x_train)


def test_groups_shape_and_balance():
    data = make_synthetic(num_devices=10, num_classes=5, groups_per_class=[1, 2, 3, 4, 5], seed=1)
    assert data.groups.shape == (10, 5)
    for c in range(5):
        sizes = np.bincount(data.groups[:, c])
        assert len(sizes) == c + 1 and sizes.min() >= 1 and sizes.max() - sizes.min() <= 1


def test_missing_classes_marked():
    data = make_synthetic(num_devices=8, num_classes=5, classes_per_device=2, seed=2)
    for dev in data.devices:
        held = np.unique(np.concatenate([dev.y_train, dev.y_test]))
        assert len(held) == 2
        np.testing.assert_array_equal(np.flatnonzero(data.groups[dev.device_id] >= 0), held)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_within_group_means_closer_than_between(seed):
    data = make_synthetic(seed=seed)
    for c in range(data.num_classes):
        means = _class_means(data, c)
        within, between = [], []
        ids = sorted(means)
        for i in ids:
            for j in ids:
                if i < j:
                    dist = np.linalg.norm(means[i] - means[j])
                    (within if data.groups[i, c] == data.groups[j, c] else between).append(dist)
        assert within and between
        assert max(within) < min(between)


def test_grouping_differs_between_classes():
    data = make_synthetic(seed=0)
    partitions = {_canonical(data.groups[:, c]) for c in range(data.num_classes)}
    assert len(partitions) >= 2


def test_invalid_arguments():
    with pytest.raises(ValueError, match="groups_per_class"):
        make_synthetic(num_classes=3, groups_per_class=[2, 2])
    with pytest.raises(ValueError, match="classes_per_device"):
        make_synthetic(num_classes=3, classes_per_device=4)
