"""Helpers for tests that drive methods by hand: planted data, and rounds of a clique in the
device loop's order (fuse what arrived → train → share, everyone receives everyone's share)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from p2pfed.algorithms import Algorithm, Received
from p2pfed.data import FederatedDataset, make_synthetic


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


def clique_rounds(algos: Sequence[Algorithm], rounds: range) -> None:
    """Run ``rounds`` of a complete graph of ``algos`` (device id = index), no network."""
    for r in rounds:
        shares = []
        for a in algos:
            if a.has_new():
                a.fuse_new(r, float(r))
            a.train(r)
            shares.append(a.share(r))
        for i, a in enumerate(algos):
            for j, p in enumerate(shares):
                if j != i and p is not None:
                    a.receive(Received(sender=j, round=r, sent_at=float(r), received_at=float(r), payload=p))
