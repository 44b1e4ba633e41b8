"""scikit-learn's bundled handwritten digits split across devices by a partitioner.

The data ship inside scikit-learn (``sklearn.datasets.load_digits``), so this benchmark runs
offline: 1,797 images of 8x8 pixels (64 features, integers 0..16), 10 classes. scikit-learn
describes it as a copy of the test set of the UCI ML "Optical Recognition of Handwritten
Digits" data set (creator E. Alpaydin). With ~36 samples per device at 50 devices, local models
are data-poor: unlike WISDM, collaboration should matter.
"""

from __future__ import annotations

from .dataset import FederatedDataset
from .devices import devices_from_parts, unsplittable
from .partition import PartitionError, PartitionSpec, partition, partition_rng

DEFAULT_PARTITION = PartitionSpec(kind="dirichlet", num_devices=50, alpha=0.3)


def load_digits_federated(*, partition_spec: PartitionSpec = DEFAULT_PARTITION,
                          test_fraction: float = 0.2, seed: int = 0,
                          scaling: str = "device", train_fraction: float = 1.0) -> FederatedDataset:
    """The digits drawn into ``partition_spec.num_devices`` devices (``natural`` is refused:
    the data have no devices of their own)."""
    if partition_spec.kind == "natural":
        raise PartitionError("digits is one central dataset with no devices of its own: choose "
                             "iid, dirichlet, shards or quantity")
    from sklearn.datasets import load_digits   # imported when used: scikit-learn is slow to import

    x, y = load_digits(return_X_y=True)
    parts = partition(y, partition_spec, partition_rng(seed))
    devices = devices_from_parts(x, y, parts, [f"digits-{i}" for i in range(len(parts))],
                                 test_fraction=test_fraction, seed=seed, scaling=scaling,
                                 train_fraction=train_fraction)
    bad = unsplittable(devices)
    if bad:
        raise PartitionError(f"device {bad[0].name} has {bad[0].num_train + bad[0].num_test} "
                             f"samples with no class twice, too few to split; raise min_samples")
    return FederatedDataset("digits", x.shape[1], 10, [str(c) for c in range(10)], devices,
                            partition=partition_spec.describe())
