"""What a device keeps between rounds: payloads dropped once fused where a method reads only fresh
ones, and the footprint estimate above what a device of each shipped method holds."""

from __future__ import annotations

import pytest

from p2pfed.algorithms.registry import ALGORITHMS
from p2pfed.engine.footprint import DEVICE_OVERHEAD_BYTES, PEER_OVERHEAD_BYTES
from p2pfed.engine.rounds_build import rounds_simulation
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import build_algorithms
from p2pfed.scenario.loader import load_scenario, with_algorithm

from bench_scripts import load_bench_script


def _caches_after_acting(repo_root, method: str) -> list[list]:
    """Every device's cache right after round 1's fusion, training and shares (before delivery)."""
    loaded = with_algorithm(load_scenario(repo_root / "scenarios" / "synthetic-small.yaml",
                                          ["rounds=3", "dataset.synthetic.num_devices=6"]), method)
    algorithms = build_algorithms(loaded)
    seen: list[list] = []
    sim = rounds_simulation(loaded, algorithms, Recorder(6), class_schedule=None,
                            on_round=lambda r, now: seen.append([list(a.cache.values()) for a in algorithms])
                            if r == 1 else None)
    sim.run()
    return seen[0]


def test_a_method_reading_only_fresh_payloads_keeps_none_once_fused(repo_root):
    caches = _caches_after_acting(repo_root, "gossip-avg")
    items = [item for cache in caches for item in cache]
    assert items and all(i.spent and not i.fresh and not i.payload.tensors and i.parsed is None for i in items)
    assert all("num_samples" in i.payload.meta for i in items)   # the record stays


def test_a_method_reading_its_cache_keeps_what_it_fused(repo_root):
    caches = _caches_after_acting(repo_root, "fedsub")
    items = [item for cache in caches for item in cache]
    assert items and not any(i.spent for i in items)
    assert all(i.payload.tensors and i.parsed is not None for i in items)


def test_fedsub_reads_a_received_subnetwork_in_place_without_a_dense_copy():
    """What FedSub parsed from a message (unit masks, the rows sent) adds next to nothing to the
    message's own arrays, far less than a model per device (the dense copy it once kept): the
    fusion reads the arrays in place (``SomeRows``)."""
    parts, _, _ = load_bench_script("device_memory").measure("fedsub", 12, 3, ["model.hidden=[16,32]"])
    assert parts["cache: received arrays (frame bytes)"] > 0
    assert parts["cache: parsed by the method"] < 0.5 * parts["model"], parts


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_the_estimate_covers_what_a_device_holds(method):
    devices = 12
    parts, _, estimated = load_bench_script("device_memory").measure(method, devices, 5, ["model.hidden=[16,32]"])
    held = sum(parts.values()) / devices
    declared = estimated - DEVICE_OVERHEAD_BYTES - PEER_OVERHEAD_BYTES * 6   # random-regular, degree 6
    assert declared >= held, (method, parts)
