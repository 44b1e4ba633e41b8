"""Partitioners for a central dataset: every sample placed once, seeded, and skewed as asked."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pfed.data import PartitionError, PartitionSpec, load_digits_federated, partition_rng
from p2pfed.data.partition import partition, partition_natural

DRAWN = ("iid", "dirichlet", "shards", "quantity")


@st.composite
def labelled(draw):
    """Labels of 2..6 classes, every class present, 60..300 samples."""
    classes = draw(st.integers(2, 6))
    n = draw(st.integers(60, 300))
    extra = draw(st.lists(st.integers(0, classes - 1), min_size=n - classes, max_size=n - classes))
    return np.array(list(range(classes)) + extra)


def _spec(kind: str, devices: int, classes: int) -> PartitionSpec:
    return PartitionSpec(kind=kind, num_devices=devices, alpha=0.5,
                         classes_per_device=min(2, classes), size_sigma=1.5, min_samples=2)


@settings(max_examples=40, deadline=None)
@given(y=labelled(), devices=st.integers(2, 8), seed=st.integers(0, 2**31 - 1),
       kind=st.sampled_from(DRAWN))
def test_every_sample_assigned_exactly_once(y, devices, seed, kind):
    """Either every sample goes to exactly one device with at least min_samples each, or the
    partitioner refuses with a PartitionError naming itself (e.g. shards that cannot cover the
    classes) — never a partition that silently loses or repeats samples."""
    try:
        parts = partition(y, _spec(kind, devices, len(np.unique(y))), partition_rng(seed))
    except PartitionError as exc:
        assert str(exc).startswith(f"{kind}: ")
        return
    assert len(parts) == devices
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(len(y)))
    assert min(len(p) for p in parts) >= 2


@settings(max_examples=25, deadline=None)
@given(y=labelled(), devices=st.integers(2, 8), seed=st.integers(0, 2**31 - 1),
       kind=st.sampled_from(DRAWN))
def test_same_seed_same_partition(y, devices, seed, kind):
    spec = _spec(kind, devices, len(np.unique(y)))
    try:
        a = partition(y, spec, partition_rng(seed))
    except PartitionError:
        with pytest.raises(PartitionError):
            partition(y, spec, partition_rng(seed))
        return
    b = partition(y, spec, partition_rng(seed))
    assert all(np.array_equal(p, q) for p, q in zip(a, b))


def test_seed_changes_the_partition():
    y = np.repeat(np.arange(5), 40)
    spec = PartitionSpec(kind="dirichlet", num_devices=6, alpha=0.5, min_samples=2)
    a, b = partition(y, spec, partition_rng(1)), partition(y, spec, partition_rng(2))
    assert not all(np.array_equal(p, q) for p, q in zip(a, b))


def _mean_label_entropy(y, parts, classes):
    """Mean over devices of the entropy of its label distribution, in bits."""
    out = []
    for p in parts:
        freq = np.bincount(y[p], minlength=classes) / len(p)
        freq = freq[freq > 0]
        out.append(-(freq * np.log2(freq)).sum())
    return float(np.mean(out))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_small_alpha_skews_labels_more_than_large(seed):
    y = np.repeat(np.arange(10), 60)
    skewed = partition(y, PartitionSpec(kind="dirichlet", num_devices=10, alpha=0.1, min_samples=5),
                       partition_rng(seed))
    even = partition(y, PartitionSpec(kind="dirichlet", num_devices=10, alpha=100.0, min_samples=5),
                     partition_rng(seed))
    # alpha 100 is close to IID (entropy near log2(10) = 3.32); alpha 0.1 puts a class on few devices
    assert _mean_label_entropy(y, skewed, 10) < _mean_label_entropy(y, even, 10) - 1.0


@settings(max_examples=30, deadline=None)
@given(y=labelled(), devices=st.integers(2, 10), k=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_shards_give_at_most_k_classes_per_device(y, devices, k, seed):
    classes = len(np.unique(y))
    spec = PartitionSpec(kind="shards", num_devices=devices, classes_per_device=k, min_samples=1)
    if k > classes or devices * k < classes:
        with pytest.raises(PartitionError, match="shards"):
            partition(y, spec, partition_rng(seed))
        return
    try:
        parts = partition(y, spec, partition_rng(seed))
    except PartitionError as exc:      # a rare class split over more devices than it has samples
        assert "fewer than min_samples" in str(exc)
        return
    assert all(len(np.unique(y[p])) <= k for p in parts)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(len(y)))


@settings(max_examples=20, deadline=None)
@given(n=st.integers(50, 500), devices=st.integers(2, 10), seed=st.integers(0, 2**31 - 1))
def test_quantity_skew_keeps_min_samples_and_varies_sizes(n, devices, seed):
    y = np.arange(n) % 3
    parts = partition(y, PartitionSpec(kind="quantity", num_devices=devices, size_sigma=2.0,
                                       min_samples=5), partition_rng(seed))
    sizes = np.array([len(p) for p in parts])
    assert sizes.min() >= 5 and sizes.sum() == n


def test_quantity_sigma_spreads_sizes():
    y = np.arange(2000) % 4
    spread = {}
    for sigma in (0.1, 2.0):
        sizes = [len(p) for p in partition(y, PartitionSpec(kind="quantity", num_devices=20,
                                                            size_sigma=sigma, min_samples=5),
                                           partition_rng(0))]
        spread[sigma] = np.std(sizes) / np.mean(sizes)
    assert spread[2.0] > 3 * spread[0.1]


def test_natural_groups_by_owner_in_sorted_order():
    owner = np.array(["b", "a", "b", "c", "a"])
    keys, parts = partition_natural(owner)
    assert keys == ["a", "b", "c"]
    assert [p.tolist() for p in parts] == [[1, 4], [0, 2], [3]]


def test_too_many_devices_is_refused():
    with pytest.raises(PartitionError, match="min_samples"):
        partition(np.arange(30) % 3, PartitionSpec(kind="iid", num_devices=10, min_samples=5),
                  partition_rng(0))


def test_partition_stream_is_its_own():
    """The partition stream differs from the per-device streams [seed, key] and from the seed."""
    ours = partition_rng(3).integers(2**62)
    assert ours != np.random.default_rng(3).integers(2**62)
    assert ours != np.random.default_rng(np.random.SeedSequence([3, 0])).integers(2**62)


def test_digits_federation_counts_every_image_once():
    data = load_digits_federated(partition_spec=PartitionSpec(kind="dirichlet", num_devices=50,
                                                              alpha=0.3), seed=0)
    counts = data.class_counts()
    assert counts.shape == (50, 10) and counts.sum() == 1797
    np.testing.assert_array_equal(counts.sum(axis=0), np.bincount(
        np.concatenate([np.concatenate([d.y_train, d.y_test]) for d in data.devices])))
    assert (counts > 0).sum(axis=1).mean() < 8   # alpha 0.3: most devices miss some digits
    assert data.partition == {"kind": "dirichlet", "num_devices": 50, "alpha": 0.3, "min_samples": 10}
    again = load_digits_federated(partition_spec=PartitionSpec(kind="dirichlet", num_devices=50,
                                                               alpha=0.3), seed=0)
    np.testing.assert_array_equal(again.class_counts(), counts)
    described = data.describe()
    assert described["class_names"] == [str(c) for c in range(10)]
    assert sum(sum(v["train"]) + sum(v["test"]) for v in described["class_counts"].values()) == 1797


def test_digits_refuses_natural():
    with pytest.raises(PartitionError, match="no devices of its own"):
        load_digits_federated(partition_spec=PartitionSpec(kind="natural"))
