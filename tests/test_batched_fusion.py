"""Fusing many devices at once equals fusing them one at a time, and the runtime really does it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from p2pfed.learning import batched_fusion
from p2pfed.learning.batched_fusion import FusionJob, run_fusion_jobs, weighted_mean_job
from p2pfed.algorithms.fedsub.row_fusion import ClassCluster, row_fusion_job
from p2pfed.learning.units import UnitLayer

SHAPES = {"layers.0.weight": (9, 5), "layers.0.bias": (9,), "layers.1.weight": (4, 9), "layers.1.bias": (4,)}
CNN_SHAPES = {"body.0.weight": (4, 1, 3, 3), "body.0.bias": (4,), "body.1.weight": (4,), "body.1.bias": (4,),
              "head.weight": (3, 4), "head.bias": (3,)}
LAYERS = [UnitLayer(9, ("layers.0.weight", "layers.0.bias"), ((5,), ())),
          UnitLayer(4, ("layers.1.weight", "layers.1.bias"), ((9,), ()))]


def _params(rng: np.random.Generator, shapes=SHAPES) -> dict[str, torch.Tensor]:
    return {n: torch.from_numpy(rng.normal(size=s).astype(np.float32)) for n, s in shapes.items()}


def _broadcasts(rng, n, shapes=SHAPES):
    """What every device sent, as the decoded read-only arrays all its receivers share."""
    sent = []
    for _ in range(n):
        arrays = {k: v.numpy().copy() for k, v in _params(rng, shapes).items()}
        for a in arrays.values():
            a.flags.writeable = False
        sent.append(arrays)
    return sent


def _averaging_jobs(devices, sent, neighbours, rng):
    return [weighted_mean_job(devices[i], float(rng.integers(1, 50)),
                              [(sent[j], float(rng.integers(0, 50))) for j in neighbours[i]])
            for i in range(len(devices))]


@pytest.mark.parametrize(("graph", "n", "dense", "shapes"), [
    ("complete", 12, True, SHAPES), ("ring", 12, True, SHAPES), ("ring", 100, False, SHAPES),
    ("complete", 12, True, CNN_SHAPES)], ids=["complete", "ring", "long-ring", "complete-cnn"])
def test_averaging_many_devices_at_once_equals_one_at_a_time(graph, n, dense, shapes, monkeypatch):
    """Also a CNN's parameters (filters of four dimensions, batch norm's scale and shift)."""
    neighbours = {i: [j for j in range(n) if j != i] if graph == "complete" else [(i - 1) % n, (i + 1) % n]
                  for i in range(n)}
    rng = np.random.default_rng(0)
    start, sent = [_params(rng, shapes) for _ in range(n)], _broadcasts(rng, n, shapes)
    alone = [{k: v.clone() for k, v in p.items()} for p in start]
    together = [{k: v.clone() for k, v in p.items()} for p in start]
    for job in _averaging_jobs(alone, sent, neighbours, np.random.default_rng(1)):
        job.run()
    products = []
    real = batched_fusion._dense
    monkeypatch.setattr(batched_fusion, "_dense", lambda name, jobs: products.append(len(jobs)) or real(name, jobs))
    run_fusion_jobs(_averaging_jobs(together, sent, neighbours, np.random.default_rng(1)))
    # one product per parameter where it pays; on a long ring (2 of 99 members each) it would do
    # 17x the work needed, so the jobs run one at a time, exactly as alone
    assert products == ([n] * len(shapes) if dense else [])
    for a, b in zip(alone, together, strict=True):
        for name in shapes:
            torch.testing.assert_close(b[name], a[name], rtol=1e-6, atol=1e-6)
            if not dense:
                assert torch.equal(b[name], a[name])


def _subnetworks(rng, n, shapes=SHAPES):
    """What every device sent as FedSub sends it: some rows of each layer (``SomeRows``), one
    object per message that all its receivers share."""
    out = []
    for arrays in _broadcasts(rng, n, shapes):
        rows = {name: rng.random(shapes[name][0]) < 0.7 for name in shapes}
        out.append(batched_fusion.SomeRows({k: arrays[k][rows[k]] for k in shapes}, rows, dict(shapes)))
    return out


def _row_jobs(devices, sent, neighbours, seed):
    """Each device's fusion of a few class clusters of itself (its own snapshot) and some of its
    neighbours, weighted per member and row (``row_fusion_job``)."""
    rng, jobs = np.random.default_rng(seed), []
    for i, own in enumerate(devices):
        members = [{k: v.clone() for k, v in own.items()}, *(sent[j] for j in neighbours[i])]
        clusters = []
        for _ in range(3):
            picked = [0, *sorted(rng.choice(np.arange(1, len(members)), size=min(3, len(members) - 1), replace=False))]
            clusters.append(ClassCluster(picked, rng.random((len(picked), 9 + 4)) < 0.8,
                                         rng.integers(1, 5, len(picked)).tolist()))
        jobs.append(row_fusion_job(own, members, clusters, "cluster-avg", LAYERS))
    return jobs


@pytest.mark.parametrize(("graph", "n", "dense"), [("complete", 12, True), ("ring", 20, False), ("ring", 60, False)],
                         ids=["complete", "ring", "long-ring"])
def test_fusing_rows_of_many_devices_at_once_equals_one_at_a_time(graph, n, dense, monkeypatch):
    """FedSub's fusions (a weight per member and row, received subnetworks read in place) of
    devices that share their peers' messages run as one product per parameter, batched over its
    rows, equal to each device's own float64 sums within float32 rounding; where they share too
    little each runs alone, bit for bit: on a ring of 20 the products would do about 7x the work
    needed, which a product per row does not win back (a weight per member would: see above)."""
    neighbours = {i: [j for j in range(n) if j != i] if graph == "complete" else [(i - 1) % n, (i + 1) % n]
                  for i in range(n)}
    rng = np.random.default_rng(4)
    start, sent = [_params(rng) for _ in range(n)], _subnetworks(rng, n)
    alone = [{k: v.clone() for k, v in p.items()} for p in start]
    together = [{k: v.clone() for k, v in p.items()} for p in start]
    for job in _row_jobs(alone, sent, neighbours, 5):
        job.run()
    products = []
    real = batched_fusion._dense
    monkeypatch.setattr(batched_fusion, "_dense", lambda name, jobs: products.append(len(jobs)) or real(name, jobs))
    monkeypatch.setattr(batched_fusion, "WEIGHTS_AT_ONCE", 9 * 12 * 5)   # the weight row-chunks too
    run_fusion_jobs(_row_jobs(together, sent, neighbours, 5))
    assert products == ([n] * len(SHAPES) if dense else [])
    for a, b, s in zip(alone, together, start, strict=True):
        for name in SHAPES:
            assert not torch.equal(a[name], s[name])   # the fusion changed something
            torch.testing.assert_close(b[name], a[name], rtol=1e-6, atol=1e-6)
            if not dense:
                assert torch.equal(b[name], a[name])


def test_follow_up_work_runs_after_the_values_are_in():
    rng = np.random.default_rng(2)
    own, members = _params(rng), [_params(rng) for _ in range(3)]
    units = rng.random((3, 9 + 4)) < 0.5
    job = row_fusion_job(own, members, [ClassCluster([0, 1, 2], units, [1.0, 2.0, 3.0])], "overlap", LAYERS)
    seen = []
    job.then.append(lambda: seen.append(own["layers.0.weight"].clone()))
    reference = {k: v.clone() for k, v in own.items()}
    ref_job = row_fusion_job(reference, members, [ClassCluster([0, 1, 2], units, [1.0, 2.0, 3.0])], "overlap", LAYERS)
    ref_job.run()
    run_fusion_jobs([job])
    assert torch.equal(own["layers.0.weight"], reference["layers.0.weight"])
    assert len(seen) == 1 and torch.equal(seen[0], reference["layers.0.weight"])


def test_a_zero_weight_member_is_never_read():
    target = {"w": torch.ones(3)}
    job = FusionJob(target, [target, {"w": np.array([np.nan] * 3, dtype=np.float32)}],
                    {"w": np.array([1.0, 0.0])})
    job.run()
    assert torch.equal(target["w"], torch.ones(3))


@pytest.mark.parametrize("stack_below", [batched_fusion.STACK_BELOW, 0], ids=["stacked", "member-by-member"])
def test_a_member_holding_some_rows_fuses_as_its_dense_form(stack_below, monkeypatch):
    """A received subnetwork is read in place, as the rows it sent (``SomeRows``), never copied
    into a dense parameter: the fusion is the same, to the bit, as with the zero-filled copy."""
    monkeypatch.setattr(batched_fusion, "STACK_BELOW", stack_below)
    rng = np.random.default_rng(3)
    members, dense = [], []
    for k, arrays in enumerate(_broadcasts(rng, 4)):
        rows = {n: None if k == 0 else rng.random(SHAPES[n][0]) < 0.6 for n in SHAPES}
        compact = {n: arrays[n] if rows[n] is None else arrays[n][rows[n]] for n in SHAPES}
        members.append(batched_fusion.SomeRows(compact, rows, dict(SHAPES)))
        zero_filled = {n: np.zeros(SHAPES[n], dtype=np.float32) for n in SHAPES}
        for n in SHAPES:
            zero_filled[n][rows[n] if rows[n] is not None else slice(None)] = compact[n]
        dense.append(zero_filled)
        for n in SHAPES:
            assert torch.equal(members[-1][n], torch.from_numpy(zero_filled[n]))
    coef = {n: rng.random((5, SHAPES[n][0])) for n in SHAPES}
    # float64 targets: the sums' last bits show, not rounded away into float32
    targets = [{n: v.double() for n, v in _params(np.random.default_rng(9)).items()} for _ in range(2)]
    FusionJob(targets[0], [*members, targets[0]], coef).run()
    FusionJob(targets[1], [*dense, targets[1]], coef).run()
    for n in SHAPES:
        assert torch.equal(targets[0][n], targets[1][n]), n
