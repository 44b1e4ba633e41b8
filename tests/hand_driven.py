"""Helpers for tests of methods: planted data, and rounds of a clique run by the real device loop
and intake (``p2pfed.testing.Federation``: fuse → train → share, everyone takes everyone's share in)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import torch

from p2pfed.algorithms import Algorithm
from p2pfed.data import FederatedDataset, make_synthetic
from p2pfed.testing import Federation


def two_populations() -> FederatedDataset:
    """Devices 0-2 share one distribution, 3-5 another (other class means, labels permuted)."""
    pa = make_synthetic(num_devices=3, num_classes=4, num_features=16, groups_per_class=1,
                        samples_per_class=30, seed=11)
    pb = make_synthetic(num_devices=3, num_classes=4, num_features=16, groups_per_class=1,
                        samples_per_class=30, seed=12)
    perm = np.array([2, 3, 0, 1])
    devices = list(pa.devices)
    for i, d in enumerate(pb.devices):
        d.device_id, d.name = 3 + i, f"population-b-{i}"
        d.y_train, d.y_test = perm[d.y_train], perm[d.y_test]
        devices.append(d)
    return FederatedDataset("two-populations", 16, 4, pa.class_names, devices)


def stub_context() -> SimpleNamespace:
    """What a runtime reads of a device that has no data (a stub method's ``ctx``): no test set,
    a tiny model, neighbours offered by the runtime."""
    return SimpleNamespace(neighbours=None, generalization_data=None, model=torch.nn.Linear(1, 2),
                           x_test=torch.zeros(0, 1), y_test=torch.zeros(0, dtype=torch.int64))


def clique_rounds(algos: Sequence[Algorithm], rounds: range) -> Federation:
    """Run ``rounds`` of a complete graph of ``algos`` (device id = index) through the real device
    loop and intake, one device at a time; returns the federation (to run it further)."""
    federation = Federation(algos)
    federation.next_round = rounds.start
    return federation.run(rounds)
