"""A peer's local state: atomic checkpoints that restore exactly, own data files, the reference."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from p2pfed.algorithms.base import Payload, Received
from p2pfed.peer import checkpoint
from p2pfed.peer.config import Neighbour, OwnData, PeerConfig
from p2pfed.peer.data import DataFileError, load_own_data
from p2pfed.scenario.build import build_algorithm, load_scenario_dataset
from p2pfed.scenario.loader import load_scenario
from tests.peer_support import SCENARIO, TINY


def algo_with_cache(device: int = 0):
    loaded = load_scenario(SCENARIO, TINY)
    dataset = load_scenario_dataset(loaded)
    algo = build_algorithm(loaded, dataset, device)
    for sender in (1, 2):
        peer = build_algorithm(loaded, dataset, sender)
        peer.train(0)
        p = peer.share(0)
        algo.receive(Received(sender=sender, round=0, sent_at=time.time(), received_at=time.time(),
                              payload=Payload(p.meta, p.tensors)))
    algo.train(0)
    algo.share(0)
    return loaded, dataset, algo


def test_checkpoint_restores_model_cache_rngs_and_counters_exactly(tmp_path):
    loaded, dataset, algo = algo_with_cache()
    algo.cache[2].fresh = False
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(path, algo, next_round=1, fingerprint="fp", runtime={"counters": {"bytes_sent": 7}})
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # the temp file was moved
    twin = build_algorithm(loaded, dataset, 0)
    next_round, runtime = checkpoint.restore(path, twin, fingerprint="fp")
    assert next_round == 1 and runtime == {"counters": {"bytes_sent": 7}}
    for (name, a), (_, b) in zip(algo.ctx.model.state_dict().items(), twin.ctx.model.state_dict().items()):
        assert torch.equal(a, b), name
    assert sorted(twin.cache) == [1, 2] and [twin.cache[s].fresh for s in (1, 2)] == [True, False]
    for s in (1, 2):
        for k, v in algo.cache[s].payload.tensors.items():
            np.testing.assert_array_equal(twin.cache[s].payload.tensors[k], v)
        assert twin.cache[s].payload.meta == algo.cache[s].payload.meta
    # The same next round on both: same training draws, same fused model.
    for a in (algo, twin):
        a.train(1)
        a.share(1)
        a.fuse(1, time.time())
    for (name, a), (_, b) in zip(algo.ctx.model.state_dict().items(), twin.ctx.model.state_dict().items()):
        assert torch.equal(a, b), name
    assert algo.ctx.rng.random() == twin.ctx.rng.random()


def test_checkpoint_of_another_peer_or_scenario_is_refused(tmp_path):
    loaded, dataset, algo = algo_with_cache()
    path = tmp_path / "c.pt"
    checkpoint.save(path, algo, next_round=1, fingerprint="fp", runtime={})
    with pytest.raises(checkpoint.CheckpointError, match="another scenario"):
        checkpoint.restore(path, build_algorithm(loaded, dataset, 0), fingerprint="other")
    with pytest.raises(checkpoint.CheckpointError, match="peer 0"):
        checkpoint.restore(path, build_algorithm(loaded, dataset, 1), fingerprint="fp")
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoint.CheckpointError, match="unreadable"):
        checkpoint.restore(path, algo, fingerprint="fp")


def test_own_npz_and_csv_data_fit_the_model_or_fail_naming_the_file(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 16)).astype(np.float32), np.repeat(np.arange(4), 10)
    npz = tmp_path / "mine.npz"
    np.savez(npz, x_train=x[:30], y_train=y[:30], x_test=x[30:], y_test=y[30:])
    d = load_own_data(npz, 5, num_features=16, num_classes=4, test_fraction=0.2, seed=0)
    assert (d.device_id, d.num_train, d.num_test, d.x_train.dtype) == (5, 30, 10, np.float32)
    csv = tmp_path / "mine.csv"
    csv.write_text("f" + ",f".join(map(str, range(15))) + ",label\n"
                   + "\n".join(",".join(map(str, row)) + f",{lab}" for row, lab in zip(x, y)))
    d = load_own_data(csv, 5, num_features=16, num_classes=4, test_fraction=0.25, seed=0)
    assert d.num_train + d.num_test == 40 and set(d.y_test) == {0, 1, 2, 3}
    with pytest.raises(DataFileError, match=r"mine.npz: train features have shape \(30, 16\), the model needs \(n, 8\)"):
        load_own_data(npz, 5, num_features=8, num_classes=4, test_fraction=0.2, seed=0)
    with pytest.raises(DataFileError, match="mine.csv: all labels must be class ids in 0..2"):
        load_own_data(csv, 5, num_features=16, num_classes=3, test_fraction=0.2, seed=0)
    np.savez(npz, x_train=np.array([object()], dtype=object))
    with pytest.raises(DataFileError, match="mine.npz"):
        load_own_data(npz, 5, num_features=16, num_classes=4, test_fraction=0.2, seed=0)


def test_every_peer_file_key_is_documented(repo_root):
    doc = (repo_root / "scenarios" / "REFERENCE.md").read_text()
    keys = [*PeerConfig.model_fields, *Neighbour.model_fields, *OwnData.model_fields]
    assert not [k for k in keys if f"`{k}`" not in doc]
