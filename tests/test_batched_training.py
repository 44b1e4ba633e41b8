"""Batched local training equals training one model at a time, and the synchronous simulation uses it
for the methods that train plainly."""

from __future__ import annotations

import csv
from dataclasses import replace

import numpy as np
import pytest
import torch

from p2pfed.algorithms import ALGORITHMS
from p2pfed.engine.runner import run_scenario
from p2pfed.learning import batched_training
from p2pfed.learning.batched_training import TrainingJob, train_group, train_jobs
from p2pfed.learning.model import build_model
from p2pfed.learning.training import TrainingConfig
from p2pfed.scenario.build import build_algorithms
from p2pfed.scenario.loader import load_scenario, with_algorithm
from tests.conftest import ROOT

# Unequal devices: an empty one, a one-sample one, sizes that batch sizes 7 and 10 do not divide.
SIZES = [23, 1, 40, 0, 17, 33, 9]
CONFIGS = [TrainingConfig(epochs=1, batch_size=8, lr=0.1),
           TrainingConfig(epochs=3, batch_size=7, lr=0.1),
           TrainingConfig(epochs=2, batch_size=10, lr=0.05, momentum=0.9),
           TrainingConfig(epochs=2, batch_size=10, lr=0.05, momentum=0.5, weight_decay=1e-2)]


# Two threads: each check again, in the slow set .ci/run runs
@pytest.fixture(autouse=True, params=[1, pytest.param(2, marks=pytest.mark.slow)], ids=["1-thread", "2-threads"])
def threads(request):
    """One thread (a sweep worker, a real peer) and two (a simulation on this 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield
    torch.set_num_threads(before)


# A whole run sets its own thread count (``engine.torch_threads``): the module's thread fixture
# would only run it twice alike, so it is held at one.
ONE_THREAD = pytest.mark.parametrize("threads", [1], indirect=True, ids=["1-thread"])


@pytest.fixture
def groups(monkeypatch) -> list[int]:
    """The size of every batch the runtime trains (``train_group``), in order."""
    sizes: list[int] = []
    real = batched_training.train_group
    monkeypatch.setattr(batched_training, "train_group",
                        lambda jobs, *a, **k: sizes.append(len(jobs)) or real(jobs, *a, **k))
    return sizes


def _jobs(config: TrainingConfig, sizes=SIZES, hidden=(16, 24), gates: bool = False) -> list[TrainingJob]:
    data = torch.Generator().manual_seed(0)
    jobs = []
    for i, n in enumerate(sizes):
        x = torch.randn(n, 12, generator=data)
        y = torch.randint(0, 5, (n,), generator=data)
        model = build_model(12, 5, list(hidden), seed=i, unit_gates=gates)
        jobs.append(TrainingJob(model, x, y, config, torch.Generator().manual_seed(1000 + i)))
    return jobs


def _assert_same(loop: list[TrainingJob], batched: list[TrainingJob], loop_losses, batched_losses) -> None:
    np.testing.assert_allclose(batched_losses, loop_losses, atol=1e-5, equal_nan=True)
    for a, b in zip(loop, batched, strict=True):
        for (name, p), q in zip(a.model.named_parameters(), b.model.parameters(), strict=True):
            torch.testing.assert_close(q.detach(), p.detach(), atol=1e-5, rtol=0, msg=name)
        # the same draws from each device's own stream: the next round shuffles alike too
        assert torch.equal(a.generator.get_state(), b.generator.get_state())


@pytest.mark.parametrize("config", CONFIGS,
                         ids=lambda c: f"e{c.epochs}-b{c.batch_size}-m{c.momentum}-wd{c.weight_decay}")
def test_batched_training_equals_one_model_at_a_time(config):
    loop, batched = _jobs(config), _jobs(config)
    loop_losses = [job.run() for job in loop]
    _assert_same(loop, batched, loop_losses, train_jobs(batched))
    assert np.isnan(loop_losses[3]) and not np.isnan(loop_losses[1])
    assert any(not torch.equal(p, q) for p, q in zip(loop[0].model.parameters(),
                                                     build_model(12, 5, [16, 24], seed=0).parameters()))


@pytest.mark.parametrize("config", CONFIGS, ids=["e1-b8", "e3-b7", "e2-b10-momentum", "e2-b10-momentum-decay"])
@pytest.mark.parametrize("way", ["grouped matmuls + autograd", "backward written out"])
def test_the_mlp_paths_train_like_the_library_path(config, way):
    """The MLP's grouped-matmul forward under autograd, and its backward written out with SGD
    added straight into the weights (what the runtimes use), against autograd over ``vmap``."""
    library, mine = _jobs(config), _jobs(config)
    library_losses = train_group([j for j in library if j.x.shape[0]], batched_training.vmap_forward)
    forward = batched_training.mlp_forward if way == "grouped matmuls + autograd" else None
    my_losses = train_group([j for j in mine if j.x.shape[0]], forward)
    np.testing.assert_allclose(my_losses, library_losses, atol=1e-6)
    for a, b in zip(library, mine, strict=True):
        for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
            torch.testing.assert_close(q.detach(), p.detach(), atol=1e-6, rtol=0)
    assert batched_training.stacked_forward(library[0].model).__name__ == "forward"   # not vmap's
    gated = build_model(12, 5, [16, 24], seed=0, unit_gates=True)
    assert batched_training.stacked_forward(gated).__name__ != "forward"


def test_models_of_different_shapes_train_in_their_own_groups_and_gates_are_parameters_too(groups):
    config = CONFIGS[2]
    def mixed():
        return _jobs(config, SIZES[:4], hidden=(16, 24)) + _jobs(config, SIZES[4:], hidden=(8,), gates=True)
    loop, batched = mixed(), mixed()
    losses = train_jobs(batched)
    assert sorted(groups) == [3, 3]   # (the empty device trains alone: nothing to do)
    _assert_same(loop, batched, [job.run() for job in loop], losses)


def _cnn_jobs(config: TrainingConfig, shape: list[int]) -> list[TrainingJob]:
    from p2pfed.learning.cnn import CNN
    data = torch.Generator().manual_seed(0)
    features = int(np.prod(shape))
    jobs = []
    for i, n in enumerate(SIZES):
        torch.manual_seed(i)
        model = CNN(features, 5, shape, [3, 4], 3)
        x = torch.randn(n, features, generator=data)
        y = torch.randint(0, 5, (n,), generator=data)
        jobs.append(TrainingJob(model, x, y, config, torch.Generator().manual_seed(1000 + i)))
    return jobs


@pytest.mark.parametrize(("config", "shape"), [(CONFIGS[1], [1, 6, 6]), (CONFIGS[2], [2, 9])],
                         ids=["2-D-e3-b7", "1-D-e2-b10-momentum"])
def test_a_cnn_with_batch_norm_trains_batched_as_one_at_a_time(config, shape):
    """The CNN's batch norm trains batched (issue 33, goal 5): its running statistics are stacked
    and updated in place, and a step's batch statistics never see another device's rows or the
    padding of a partial batch: parameters and running statistics equal one device at a time."""
    loop, batched = _cnn_jobs(config, shape), _cnn_jobs(config, shape)
    assert all(job.batchable() for job in batched if job.x.shape[0])
    loop_losses = [job.run() for job in loop]
    _assert_same(loop, batched, loop_losses, train_jobs(batched))
    for a, b in zip(loop, batched, strict=True):
        for (name, x), y in zip(a.model.named_buffers(), b.model.buffers(), strict=True):
            torch.testing.assert_close(y, x, atol=1e-5, rtol=0, msg=name)
    moved = dict(loop[0].model.named_buffers())["body.1.running_var"]
    assert not torch.equal(moved, torch.ones_like(moved))   # the statistics did move


def test_train_group_is_the_same_whatever_order_the_devices_come_in():
    config = CONFIGS[1]
    a, b = _jobs(config, SIZES[:3] + SIZES[4:]), _jobs(config, SIZES[:3] + SIZES[4:])
    la = train_group(a)
    lb = train_group(b[::-1])[::-1]
    np.testing.assert_allclose(lb, la, atol=1e-6)


@pytest.mark.parametrize("kind", ["mlp", "mlp-momentum", "cnn"])
def test_a_group_split_into_chunks_trains_as_one_group(kind, groups):
    """A round of thousands of devices trains ``GROUP_LIMIT`` devices at a time (memory). On one
    thread the MLP's grouped products give each device its own slice of every product: any split
    gives the same bits. Two threads divide a product's work by its size, and a CNN runs
    ``vmap``'s convolutions, whose arithmetic follows the batch's size: the same to float rounding."""
    make = {"mlp": lambda: _jobs(CONFIGS[1]), "mlp-momentum": lambda: _jobs(CONFIGS[3]),
            "cnn": lambda: _cnn_jobs(CONFIGS[1], [1, 6, 6])}[kind]
    whole, split = make(), make()
    whole_losses = train_jobs(whole)
    split_losses = train_jobs(split, limit=2)
    assert groups[0] == len(SIZES) - 1 and max(groups[1:]) == 2   # the empty device trains alone
    if kind == "cnn" or torch.get_num_threads() > 1:
        _assert_same(whole, split, whole_losses, split_losses)
        return
    np.testing.assert_array_equal(split_losses, whole_losses)
    for a, b in zip(whole, split, strict=True):
        for p, q in zip(a.model.state_dict().values(), b.model.state_dict().values(), strict=True):
            assert torch.equal(p, q)


def _phased(config: TrainingConfig, kind: str = "mlp") -> list[TrainingJob]:
    """Each device: its last layer alone (the rest fixed), followed by the rest (the last fixed)."""
    jobs = _jobs(config) if kind == "mlp" else _cnn_jobs(config, [1, 6, 6])
    out = []
    for job in jobs:
        params = list(job.model.parameters())
        body = replace(job, trainable=tuple(params[:-2]))
        out.append(replace(job, epochs=2, trainable=tuple(params[-2:]), followed_by=body))
    return out


@pytest.mark.parametrize("config", CONFIGS[1:3], ids=["e3-b7", "e2-b10-momentum"])
@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_a_round_in_phases_trains_each_phase_batched_as_each_device_alone(config, kind, groups):
    """Jobs training part of the model, in phases: each phase is one batch across the devices,
    what a phase leaves fixed keeps its bits, and the result equals each device alone."""
    loop, batched = _phased(config, kind), _phased(config, kind)
    bodies = [[p.detach().clone() for p in list(job.model.parameters())[:-2]] for job in batched]
    head_losses = train_jobs([replace(job, followed_by=None) for job in batched])
    for job, body in zip(batched, bodies, strict=True):   # the head phase left the body alone
        assert all(torch.equal(p.detach(), q) for p, q in zip(list(job.model.parameters())[:-2], body, strict=True))
    heads = [[p.detach().clone() for p in list(job.model.parameters())[-2:]] for job in batched]
    body_losses = train_jobs([job.followed_by for job in batched])
    for job, head in zip(batched, heads, strict=True):    # and the body phase the head
        assert all(torch.equal(p.detach(), q) for p, q in zip(list(job.model.parameters())[-2:], head, strict=True))
    assert groups == [6, 6]   # each phase one batch (the empty device trains alone)
    loop_head_losses = [job.train() for job in loop]
    _assert_same(loop, batched, loop_head_losses + [job.followed_by.train() for job in loop], head_losses + body_losses)


def _masked(jobs: list[TrainingJob]) -> list[TrainingJob]:
    """Each device with its own gradient masks on two parameters: about half their elements frozen."""
    out = []
    for i, job in enumerate(jobs):
        named = list(job.model.named_parameters())
        pick = torch.Generator().manual_seed(i)
        masks = {name: (torch.rand(p.shape, generator=pick) < 0.5).float() for name, p in (named[0], named[-1])}
        out.append(replace(job, gradient_masks=masks))
    return out


@pytest.mark.parametrize("config", CONFIGS[1:3], ids=["e3-b7", "e2-b10-momentum"])
@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_masked_gradients_train_batched_as_each_device_alone(config, kind, groups):
    """Jobs whose gradients are masked (a pruned sub-model's training) are one batch, the masked
    elements keep their bits, the others train, and the result equals each device alone."""
    make = (lambda: _jobs(config)) if kind == "mlp" else (lambda: _cnn_jobs(config, [1, 6, 6]))
    loop, batched = _masked(make()), _masked(make())
    start = [{n: p.detach().clone() for n, p in job.model.named_parameters()} for job in batched]
    losses = train_jobs(batched)
    assert groups == [len(SIZES) - 1]   # every device with data, one batch
    for job, before in zip(batched, start, strict=True):
        if not job.x.shape[0]:
            continue
        params = dict(job.model.named_parameters())
        for name, mask in (job.gradient_masks or {}).items():
            now = params[name].detach()
            assert torch.equal(now[mask == 0], before[name][mask == 0]), name
            assert not torch.equal(now[mask == 1], before[name][mask == 1]), name
    _assert_same(loop, batched, [job.run() for job in loop], losses)


def test_a_job_runs_the_phases_that_follow_it_alone_and_batched():
    chained, alone, by_hand = _phased(CONFIGS[0]), _phased(CONFIGS[0]), _phased(CONFIGS[0])
    assert [len(job.phases()) for job in alone] == [2] * len(SIZES)
    train_jobs(chained)                             # both phases, batched
    last = [job.run() for job in alone]             # both phases, one device at a time
    for job in by_hand:
        job.train()
    # run() returns the last phase's loss
    np.testing.assert_array_equal(last, [job.followed_by.train() for job in by_hand])
    _assert_same(alone, chained, last, last)


def test_the_runtime_batches_the_training_of_methods_that_train_plainly(repo_root):
    """A method's ``train`` returns its job; the runtime batches the plain ones (cross-entropy on
    the whole model), runs the others alone, and a method that trains its own way returns None."""
    loaded = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml", ["dataset.synthetic.num_devices=3"])
    dataset = loaded.federation
    batchable = {}
    for name in ALGORITHMS:
        job = build_algorithms(with_algorithm(loaded, name), dataset)[0].train(0)
        batchable[name] = job is not None and job.batchable()
    # FedProto's pull needs averaged prototypes: before any arrive (round 0) its training is plain;
    # FedRep's and ProtoHAR's first phase (the head, the body fixed) is
    assert {n for n, b in batchable.items() if b} == {"local", "gossip-avg", "fedsub", "fedclar", "fedhome", "ditto",
                                                       "fedper", "fedproto", "lg-fedavg", "fedbn", "fedrep", "protohar"}
    # FedCLAR's clustered update, kept by its job's ``then`` after the batched training, is what
    # the training changed
    algos = build_algorithms(with_algorithm(loaded, "fedclar"), dataset)
    before = [{n: p.detach().clone() for n, p in a.ctx.model.named_parameters()} for a in algos]
    jobs = [a.train(a.cluster_round) for a in algos]
    assert all(job.batchable() for job in jobs)
    train_jobs(jobs)
    for a, start in zip(algos, before, strict=True):
        moved = torch.cat([(p.detach() - start[n]).flatten() for n, p in a.ctx.model.named_parameters()])
        assert a.update is not None and np.array_equal(a.update, moved.numpy())


def _f1(path) -> list[float]:
    with open(path / "rounds.csv") as f:
        return [float(row["f1_macro_mean"]) for row in csv.DictReader(f)]


@ONE_THREAD
@pytest.mark.parametrize(("method", "phases"), [("gossip-avg", 1), ("fedsub", 1), ("fedrep", 2)])
def test_a_run_gives_the_same_results_batched_or_not(method, phases, tmp_path, groups):
    """A real synchronous run, 12 devices of unequal sizes (half with classes hidden at first);
    FedRep trains in two phases (head, then body), each batched."""
    overrides = [f"algorithm.name={method}", "rounds=8", "dynamic.devices_fraction=0.5",
                 "dynamic.return_every=3", "training.momentum=0.5"]
    scenario = ROOT / "scenarios" / "synthetic-small.yaml"
    run_scenario(load_scenario(scenario, overrides), tmp_path / "batched", progress=False)
    assert groups == [12] * 8 * phases    # every device, every round (and phase), in one batch
    run_scenario(load_scenario(scenario, [*overrides, "engine.batched_training=false"]), tmp_path / "one-at-a-time",
                 progress=False)
    assert len(groups) == 8 * phases
    np.testing.assert_allclose(_f1(tmp_path / "batched"), _f1(tmp_path / "one-at-a-time"), atol=1e-4)


@ONE_THREAD
def test_safl_trains_its_pruned_sub_model_batched_in_a_real_run(tmp_path, groups):
    """SAFL's stage two (the fixed sub-model, its pruned units frozen by gradient masks) is one
    batch a round in a real run, and the run ends as one device at a time does."""
    overrides = ["algorithm.name=safl", "rounds=8", "algorithm.target_rate=0.2", "algorithm.fine_tune_epochs=1"]
    scenario = ROOT / "scenarios" / "synthetic-small.yaml"
    run_scenario(load_scenario(scenario, overrides), tmp_path / "batched", progress=False)
    assert len(groups) >= 4 and set(groups) == {12}   # the rounds past stage one, every device in one batch
    stage_two = len(groups)
    run_scenario(load_scenario(scenario, [*overrides, "engine.batched_training=false"]), tmp_path / "one-at-a-time",
                 progress=False)
    assert len(groups) == stage_two
    np.testing.assert_allclose(_f1(tmp_path / "batched"), _f1(tmp_path / "one-at-a-time"), atol=1e-4)


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "batched"])
def test_a_gradient_mask_for_no_parameter_or_of_the_wrong_shape_is_refused(batched):
    jobs = _jobs(CONFIGS[0])[:3]
    train = (lambda js: train_jobs(js)) if batched else (lambda js: js[0].run())
    with pytest.raises(ValueError, match=r"not parameters of the model.*|.*\['nope'\]"):
        train([replace(job, gradient_masks={"nope": torch.ones(3)}) for job in jobs])
    with pytest.raises(ValueError, match="gradient mask for 'layers.0.bias' has shape"):
        train([replace(job, gradient_masks={"layers.0.bias": torch.ones(3)}) for job in jobs])
