"""FedAli: the ALP layer's transport plan, assignments and prototype updates, the serverless
k-means aggregation, and the mechanism firing in real runs (rounds and contacts); plus
``evaluation.generalization`` (each device scored on the other devices' test data)."""

from __future__ import annotations

import copy
import csv
import json
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from p2pfed.algorithms import Received
from p2pfed.device import DeviceLoop
from p2pfed.engine.runner import run_scenario
from p2pfed.algorithms.fedali.alignment import ALPLayer, kmeans_prototypes, marginal_error, sinkhorn_plan
from p2pfed.learning.training import evaluate
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import build_algorithm, build_algorithms
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.loader import load_scenario
from p2pfed.testing import Federation, fuse_once, train_once
from tests.compare_runs import keeps_local_gain, run_from_start
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
SMALL = ["dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=16", "model.hidden=[16,32]",
         "rounds=5", "algorithm.name=fedali", "algorithm.prototypes=8"]


def _unit(n: int, d: int, seed: int) -> torch.Tensor:
    return F.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=1)


def _layer(dim=4, g=2, **kw) -> ALPLayer:
    args = {"beta": 0.2, "gamma": 0.9, "epsilon": 0.05, "iterations": 3} | kw
    return ALPLayer(dim, g, generator=torch.Generator().manual_seed(0), **args)


# -- the transport plan ---------------------------------------------------------------------------
@pytest.mark.parametrize("n,k,eps,iterations", [(40, 6, 0.05, 3), (7, 16, 0.05, 3), (30, 5, 0.2, 10)])
def test_sinkhorn_plan_equals_pots(n, k, eps, iterations):
    """Our few tensor lines against POT's Sinkhorn-Knopp on the same cost (-similarity) and
    uniform marginals, with the same number of sweeps."""
    import ot   # POT, the reference, only where it is compared against (its import is long)

    sim = _unit(n, 8, 1) @ _unit(k, 8, 2).T
    ours = sinkhorn_plan(sim, eps, iterations).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # "did not converge": few sweeps on purpose
        ref = ot.sinkhorn(np.full(k, 1 / k), np.full(n, 1 / n), -sim.T.numpy(), eps,
                          numItermax=iterations, stopThr=0).T
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-15)


def test_sinkhorn_plan_is_doubly_stochastic_within_tolerance():
    sim = _unit(50, 8, 3) @ _unit(10, 8, 4).T
    three = sinkhorn_plan(sim, 0.05, 3)
    # Three sweeps (the paper's setting): the columns are exact, the rows on their way.
    np.testing.assert_allclose(three.sum(dim=0).numpy() * 10, 1.0, atol=1e-12)
    converged = sinkhorn_plan(sim, 0.05, 300)
    assert marginal_error(converged) < 1e-6
    assert marginal_error(three) > marginal_error(converged)
    # A tiny epsilon neither overflows nor yields NaN (the row maximum is taken out before exp).
    assert torch.isfinite(sinkhorn_plan(sim, 1e-3, 3)).all()


# -- the ALP layer -----------------------------------------------------------------------------------
def _planted():
    """Embeddings near direction e0; global prototypes e0 and e1; local prototypes e2 and e3."""
    eye = torch.eye(4)
    layer = _layer(beta=1.0, gamma=1.0)
    with torch.no_grad():
        layer.global_prototypes.copy_(eye[[0, 1]])
        layer.local_prototypes.copy_(eye[[2, 3]] + 0.5 * eye[0])
    x = eye[0] + 0.05 * torch.randn(12, 4, generator=torch.Generator().manual_seed(5))
    return layer, x, eye


def test_training_aligns_to_hard_assigned_global_prototypes_and_inference_to_local_ones():
    layer, x, eye = _planted()
    glu = lambda p: F.normalize(F.glu(layer.glu(p), dim=-1), dim=-1)  # noqa: E731  (β = 1: x̂ is the GLU output)

    def matched(out, prototypes):
        """Which prototype's GLU output each row is (-1: none of them)."""
        return [next((j for j, p in enumerate(prototypes) if torch.allclose(r, glu(p))), -1) for r in out]

    layer.train()
    out = layer(x)
    on_global = matched(out, layer.global_prototypes)
    assert -1 not in on_global                         # every row: a global prototype, hard-assigned
    # The plan's uniform column marginal spreads the batch over both prototypes, although every
    # embedding is closer to e0: transport, not nearest-neighbour.
    assert set(on_global) == {0, 1} == layer.last_global_used
    layer.eval()
    out = layer(x)
    assert -1 not in matched(out, layer.local_prototypes)   # inference: local prototypes only
    assert torch.allclose(out.norm(dim=1), torch.ones(12))


def test_local_prototypes_follow_the_embeddings_by_ema_and_global_ones_stay():
    layer, x, eye = _planted()
    layer.gamma = 0.5
    before_local, before_global = layer.local_prototypes.clone(), layer.global_prototypes.clone()
    layer.train()
    layer(x)
    moved = layer.local_prototypes
    assert torch.equal(layer.global_prototypes, before_global)
    # Each local prototype moved toward the data (direction e0), halfway by γ = 0.5.
    toward = F.normalize(x, dim=1).mean(dim=0)
    assert (F.cosine_similarity(moved, toward.expand_as(moved)) >
            F.cosine_similarity(before_local, toward.expand_as(moved))).all()
    layer.eval()
    frozen = layer.local_prototypes.clone()
    layer(x)
    assert torch.equal(layer.local_prototypes, frozen)                    # inference never updates


def test_gamma_one_keeps_the_local_prototypes():
    layer, x, _ = _planted()
    before = layer.local_prototypes.clone()
    layer.train()
    layer(x)
    assert torch.equal(layer.local_prototypes, before)


def test_the_prototypes_get_no_gradient_but_the_glu_does():
    layer, x, _ = _planted()
    layer.train()
    x = x.clone().requires_grad_(True)
    layer(x).sum().backward()
    assert layer.glu.weight.grad is not None and x.grad is not None
    assert not layer.local_prototypes.requires_grad and not layer.global_prototypes.requires_grad


def test_kmeans_global_prototypes_are_the_centroids_of_the_neighbourhoods_local_prototypes():
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    b = torch.tensor([[0.9, 0.1], [0.1, 0.9]])
    c = torch.tensor([[1.1, 0.0], [0.0, 1.1]])
    out = kmeans_prototypes([a, b, c], [1.0, 2.0, 1.0])
    torch.testing.assert_close(out, torch.tensor([[1.0, 1 / 30], [1 / 30, 1.0]]))


def test_devices_holding_the_same_prototype_sets_cluster_them_once_and_alike(monkeypatch):
    """Three devices that all hear each other: whatever order a device's payloads arrived in,
    it clusters its members in device order, so all three get the same global prototypes, the
    k-means runs once for the three, and each is still told the work. A message's prototypes are
    digested once for all its receivers (its memo), each device's own once."""
    from p2pfed.algorithms.fedali import alignment, method
    digested: list[int] = []
    monkeypatch.setattr(method, "prototype_digest",
                        lambda p, real=alignment.prototype_digest: digested.append(1) or real(p))
    monkeypatch.setattr(alignment, "prototype_digest",
                        lambda p, real=alignment.prototype_digest: digested.append(1) or real(p))
    loaded = load_scenario(SCENARIO, SMALL)
    algos = build_algorithms(loaded, loaded.federation)[:3]
    for algo in algos:
        train_once(algo, 0)
    shares = [algo.share(0) for algo in algos]
    for i, algo in enumerate(algos):
        for j in sorted((j for j in range(3) if j != i), reverse=i == 1):   # device 1 hears them in reverse
            algo.receive(Received(sender=j, round=0, sent_at=0.0, received_at=0.0, payload=shares[j]))
    clusterings = algos[0].clusterings
    assert all(a.clusterings is clusterings for a in algos)   # one memo for the process
    hits, told = clusterings.hits, []
    for algo in algos:
        told.append([])
        algo.ctx.count_work = told[-1].append
        fuse_once(algo, 0, 0.0)
    assert clusterings.hits == hits + 2
    assert len(digested) == 3 + 3
    for algo in algos[1:]:
        assert torch.equal(algo.alp.global_prototypes, algos[0].alp.global_prototypes)
    assert told[0] and told[0][0] > 0 and told[0] == told[1] == told[2]


# -- the method in real runs -------------------------------------------------------------------------
def test_fedali_mechanism_fires_in_a_simulation_run(tmp_path):
    summary = run_scenario(load_scenario(SCENARIO, SMALL + ["evaluation.generalization=true"]), tmp_path,
                           progress=False)
    stats = json.loads((tmp_path / "summary.json").read_text())["algorithm_stats"]
    assert stats == summary["algorithm_stats"]
    assert stats["local_prototype_movement"] > 0          # EMA toward the embeddings
    assert stats["global_prototype_shift"] > 0            # k-means moved the global prototypes
    assert stats["kmeans_fusions"] == 4                    # every round after the first
    # Each device clustered its own and its neighbours' local prototypes (G each).
    degree = summary["topology"]["mean_degree"]
    assert stats["kmeans_points"] == pytest.approx(8 * (1 + degree))
    assert 0 < stats["plan_marginal_error"] < 1 and 1 <= stats["global_prototypes_assigned"] <= 8
    assert summary["final"]["generalization_f1_mean"] >= 0
    # A share carries the weights, the GLU and the local prototypes: more than the bare model.
    assert summary["comm"]["bytes_per_message_vs_full_model"] > 1


def test_fedali_learns_planted_classes():
    data = ["rounds=8", "training.lr=0.1", "dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=24",
            "dataset.synthetic.groups_per_class=2", "model.hidden=[16,32]"]
    summary, start = run_from_start(load_scenario(SCENARIO, [*data, "algorithm.name=fedali"]))
    keeps_local_gain(summary, start, SCENARIO, data)


def test_fedali_runs_over_contacts():
    loaded = load_scenario(SCENARIO, SMALL + [
        "contacts.kind=poisson", "contacts.duration_s=600", "contacts.mean_intercontact_s=100",
        "contacts.mean_duration_s=30", "asynchronous.train_period_s=60", "evaluation.every_s=300",
        "asynchronous.send_policy=whole", "evaluation.generalization=true"])
    summary = run_scenario(loaded, None, progress=False)
    stats = summary["algorithm_stats"]
    assert stats["kmeans_fusions"] > 0 and stats["global_prototype_shift"] > 0
    assert stats["local_prototype_movement"] > 0
    assert "generalization_f1_mean" in summary["final"]


def _trained_pair(*overrides: str):
    """Devices 0 and 1 after one training each (γ = 0.5: the local prototypes move far from the
    shared start), device 1's share in device 0's cache."""
    loaded = load_scenario(SCENARIO, SMALL + ["algorithm.gamma=0.5", *overrides])
    dataset = loaded.federation
    a, b = (build_algorithm(loaded, dataset, i) for i in (0, 1))
    for algo in (a, b):
        train_once(algo, 0)
    a.receive(Received(sender=1, round=0, sent_at=0.0, received_at=0.0, payload=b.share(0)))
    return a


@torch.no_grad()
def _logits(model, x):
    model.eval()
    return model(x)


def test_after_a_fusion_the_evaluated_model_aligns_to_the_personal_prototypes_not_the_global_ones():
    """Eq. 3: inference uses P_local. A fusion brings new global prototypes but leaves the local
    ones as the device's training left them, so the model scored after the fusion is personal."""
    a = _trained_pair()
    personal = a.alp.local_prototypes.clone()
    fuse_once(a, 1, 1.0)
    new_global = a.alp.global_prototypes.clone()
    assert not torch.allclose(new_global, personal, atol=1e-3)        # the fusion brought others
    model = a.evaluated_model()
    assert torch.equal(model.alp.local_prototypes, personal)
    x = a.ctx.x_test
    scored = _logits(copy.deepcopy(model), x)
    # Inference reads the local prototypes only: other global prototypes change nothing ...
    other_global = copy.deepcopy(model)
    other_global.alp.global_prototypes.copy_(F.normalize(torch.randn(new_global.shape), dim=1))
    assert torch.equal(_logits(other_global, x), scored)
    # ... and the fused global prototypes in place of the personal ones change the predictions.
    aligned_to_global = copy.deepcopy(model)
    aligned_to_global.alp.local_prototypes.copy_(new_global)
    assert not torch.allclose(_logits(aligned_to_global, x), scored, atol=1e-4)


def test_the_evaluation_after_fusion_scores_the_personal_prototypes_in_a_federation():
    """Through the device loop (fuse, then the due evaluation): every device's recorded loss is
    that of its model with the prototypes its last training left, not with the global ones."""
    loaded = load_scenario(SCENARIO, SMALL + ["algorithm.gamma=0.5"])
    algos = build_algorithms(loaded, loaded.federation)
    fed = Federation(algos, batched=True)
    fed.round()                                                        # train, share
    personal = [a.alp.local_prototypes.clone() for a in algos]
    fed.round(train=[False] * len(algos), evaluate=True)               # fuse, evaluate; no training
    for a, mine, scored in zip(algos, personal, fed.recorder.last_evaluations, strict=True):
        assert torch.equal(a.alp.local_prototypes, mine)
        assert scored.loss == pytest.approx(evaluate(a.evaluated_model(), a.ctx.x_test, a.ctx.y_test).loss)
        to_global = copy.deepcopy(a.evaluated_model())
        to_global.alp.local_prototypes.copy_(a.alp.global_prototypes)
        assert scored.loss != pytest.approx(evaluate(to_global, a.ctx.x_test, a.ctx.y_test).loss, abs=1e-6)


def test_reset_local_restarts_the_training_from_the_global_prototypes_and_can_be_turned_off():
    """Sec. 4: P_local is reset to P_global at the start of each round's local training (or kept
    with reset_local false); either way the fusion itself leaves the personal prototypes."""
    for reset in (True, False):
        a = _trained_pair(f"algorithm.reset_local={str(reset).lower()}")
        personal = a.alp.local_prototypes.clone()
        fuse_once(a, 1, 1.0)
        assert torch.equal(a.alp.local_prototypes, personal)
        a.alp.gamma = 1.0                       # no EMA: the training shows where it started from
        train_once(a, 1)
        assert torch.equal(a.alp.local_prototypes, a.alp.global_prototypes) is reset
        assert torch.equal(a.alp.local_prototypes, personal) is not reset


def test_a_reset_still_due_survives_a_checkpoint():
    """A device that fused but has not trained since (it sat a round out) resumes with its
    personal prototypes and its reset still to come."""
    a = _trained_pair()
    fuse_once(a, 1, 1.0)
    resumed = _trained_pair()
    resumed.load_state_dict(copy.deepcopy(a.state_dict()))
    for algo in (a, resumed):
        algo.alp.gamma = 1.0
        train_once(algo, 1)
        assert torch.equal(algo.alp.local_prototypes, a.alp.global_prototypes)


def test_a_second_fusion_before_training_clusters_the_prototypes_the_device_will_train_from():
    """A device that fuses twice without training (it sat a round out) contributes the global
    prototypes its due reset will start from, not its stale personal ones, as when the reset
    happened at the fusion."""
    a = _trained_pair()
    fuse_once(a, 1, 1.0)
    first = a.alp.global_prototypes.clone()
    again = copy.deepcopy(a)
    a.receive(Received(sender=2, round=1, sent_at=1.0, received_at=1.0, payload=again.share(1)))
    fuse_once(a, 2, 2.0)
    expected = kmeans_prototypes([first, torch.from_numpy(again.share(1).tensors["local_prototypes"])],
                                 [float(a.ctx.num_samples)] * 2)
    torch.testing.assert_close(a.alp.global_prototypes, expected)


def test_a_payload_with_bad_prototypes_is_refused():
    from p2pfed.algorithms import ArtifactError

    loaded = load_scenario(SCENARIO, SMALL)
    dataset = loaded.federation
    a, b = build_algorithm(loaded, dataset, 0), build_algorithm(loaded, dataset, 1)
    payload = b.share(0)
    payload.tensors["local_prototypes"] = payload.tensors["local_prototypes"][:3]
    with pytest.raises(ArtifactError, match="local_prototypes"):
        a.check(payload)
    payload.tensors["local_prototypes"] = np.full((8, 32), np.nan, dtype=np.float32)
    with pytest.raises(ArtifactError, match="local_prototypes"):
        a.check(payload)


def test_hidden_layer_past_the_model_is_reported_naming_the_field(tmp_path, capsys):
    from p2pfed.cli.main import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("rounds: 4\nmodel: {hidden: [8, 8]}\nalgorithm: {name: fedali, hidden_layer: 3}\n")
    assert main(["validate", str(bad)]) == 2
    assert f"{bad}: algorithm.hidden_layer: 3 is past the model's 2 hidden layer(s)" in capsys.readouterr().out


def test_aligning_the_first_hidden_layer_shrinks_the_share():
    loaded = load_scenario(SCENARIO, SMALL)
    dataset = loaded.federation
    last = build_algorithm(loaded, dataset, 0).share(0)
    first = build_algorithm(load_scenario(SCENARIO, SMALL + ["algorithm.hidden_layer=1"]), dataset, 0).share(0)
    assert last.tensors["local_prototypes"].shape == (8, 32) and first.tensors["local_prototypes"].shape == (8, 16)
    size = lambda p: sum(a.nbytes for a in p.tensors.values())  # noqa: E731
    assert size(first) < size(last)


# -- evaluation.generalization -----------------------------------------------------------------------
GEN = ["dataset.synthetic.num_devices=4", "dataset.synthetic.samples_per_class=16", "model.hidden=[16,32]",
       "rounds=2", "dataset.synthetic.classes_per_device=2", "algorithm.name=local"]


def test_generalization_is_each_devices_macro_f1_on_the_other_devices_pooled_test_data():
    loaded = load_scenario(SCENARIO, GEN + ["evaluation.generalization=true"])
    dataset = loaded.federation
    algos = build_algorithms(loaded, dataset)
    recorder = Recorder(len(algos))
    for i, algo in enumerate(algos):
        train_once(algo, 0)
        DeviceLoop(i, algo, recorder, clock=lambda: 0.0, max_message_bytes=2**20).evaluate(0)
    expected = []
    for i, algo in enumerate(algos):
        others = [d for d in dataset.devices if d.device_id != i]
        x = torch.as_tensor(np.concatenate([d.x_test for d in others]))
        y = torch.as_tensor(np.concatenate([d.y_test for d in others]))
        expected.append(evaluate(algo.ctx.model, x, y).f1_macro)
        own = evaluate(algo.ctx.model, algo.ctx.x_test, algo.ctx.y_test).f1_macro
        assert recorder.last_evaluations[i].f1_macro == own                   # own test data restored
    row = recorder.rows[0]
    assert row["generalization_f1_mean"] == pytest.approx(np.mean(expected), abs=1e-6)
    assert row["generalization_f1_std"] == pytest.approx(np.std(expected), abs=1e-6)
    # Devices that each hold 2 of 4 classes do worse on the others' data than on their own.
    assert row["generalization_f1_mean"] < row["f1_macro_mean"]


def test_generalization_columns_appear_only_when_enabled(tmp_path):
    off = run_scenario(load_scenario(SCENARIO, GEN), tmp_path / "off", progress=False)
    on = run_scenario(load_scenario(SCENARIO, GEN + ["evaluation.generalization=true"]), tmp_path / "on",
                      progress=False)
    header = lambda d: next(csv.reader((tmp_path / d / "rounds.csv").open()))  # noqa: E731
    assert "generalization_f1_mean" not in header("off") and "generalization_f1_mean" not in off["final"]
    assert header("on")[-2:] == ["generalization_f1_mean", "generalization_f1_std"]
    rows = list(csv.DictReader((tmp_path / "on" / "rounds.csv").open()))
    assert float(rows[-1]["generalization_f1_mean"]) == on["final"]["generalization_f1_mean"]
    # Personalization is the same whether or not generalization is measured.
    assert on["final"]["f1_macro_mean"] == off["final"]["f1_macro_mean"]


def test_generalization_survives_recorder_state_and_merge():
    one, two = Recorder([0]), Recorder([1])
    from p2pfed.learning.training import Evaluation
    for rec, dev, f1 in ((one, 0, 0.25), (two, 1, 0.75)):
        rec.evaluated(dev, 0, 1.0, Evaluation(0.9, 0.1, 0.9))
        rec.generalized(dev, 0, f1)
    merged = Recorder.merge([Recorder.from_state(json.loads(json.dumps(r.state_dict()))) for r in (one, two)])
    assert merged.rows[0]["generalization_f1_mean"] == 0.5
    assert merged.rows[0]["generalization_f1_std"] == 0.25


def test_generalization_columns_survive_a_checkpoint_restart(tmp_path):
    from p2pfed.engine.runner import Checkpointing

    loaded = lambda: load_scenario(SCENARIO, GEN + ["rounds=4", "evaluation.generalization=true"])  # noqa: E731
    whole = run_scenario(loaded(), tmp_path / "whole", progress=False)
    ckpt = Checkpointing(tmp_path / "run.ckpt", stop_after_round=2)
    assert run_scenario(loaded(), None, progress=False, checkpointing=ckpt) is None
    resumed = run_scenario(loaded(), tmp_path / "resumed", progress=False, checkpointing=Checkpointing(ckpt.path))
    assert resumed["final"] == whole["final"]
    assert (tmp_path / "resumed" / "rounds.csv").read_text() == (tmp_path / "whole" / "rounds.csv").read_text()


def test_adam_training_is_torchs_adam_step_for_step():
    from p2pfed.learning.training import TrainingConfig, train_epochs
    torch.manual_seed(0)
    x, y = torch.randn(20, 5), torch.randint(0, 3, (20,))
    ours = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    reference = copy.deepcopy(ours)
    config = TrainingConfig(epochs=2, batch_size=8, lr=0.01, weight_decay=0.001, optimizer="adam")
    train_epochs(ours, x, y, config, torch.Generator().manual_seed(1))
    adam, order_stream = torch.optim.Adam(reference.parameters(), lr=0.01, weight_decay=0.001), torch.Generator()
    order_stream.manual_seed(1)
    for _ in range(2):
        order = torch.randperm(20, generator=order_stream)
        for start in range(0, 20, 8):
            idx = order[start:start + 8]
            adam.zero_grad()
            F.cross_entropy(reference(x[idx]), y[idx]).backward()
            adam.step()
    for a, b in zip(ours.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b) and a.grad is None
    sgd = copy.deepcopy(reference)
    train_epochs(sgd, x, y, TrainingConfig(lr=0.01), torch.Generator().manual_seed(1))
    assert not torch.equal(next(sgd.parameters()), next(reference.parameters()))


def test_fused_adam_is_adam_one_tensor_at_a_time_to_float_rounding():
    """``make_adam`` (torch's fused form) against the default CPU loop, with weight decay and a
    parameter that gets no gradient in some steps (it is skipped, as the loop skips it)."""
    from p2pfed.learning.training import TrainingConfig, make_adam
    config = TrainingConfig(lr=0.003, weight_decay=0.01, optimizer="adam")
    streams = torch.Generator().manual_seed(3)
    start = [torch.randn(shape, generator=streams) for shape in [(7, 5), (7,), (3, 7), (300, 40)]]
    ours, loop = ([torch.nn.Parameter(p.clone()) for p in start] for _ in range(2))
    steppers = [make_adam(ours, config), torch.optim.Adam(loop, lr=0.003, weight_decay=0.01, foreach=False)]
    for step in range(25):
        grads = [None if (i == 2 and step % 3 == 0) else torch.randn(p.shape, generator=streams)
                 for i, p in enumerate(start)]
        for params, adam in zip((ours, loop), steppers):
            for p, g in zip(params, grads):
                p.grad = None if g is None else g.clone()
            adam.step()
    for a, b in zip(ours, loop):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert adam_steps(steppers[0], ours[2]) == adam_steps(steppers[1], loop[2]) == 25 - 9   # skipped alike
    assert not torch.equal(ours[2].detach(), start[2])


def test_adam_with_a_non_contiguous_gradient_or_parameter_is_torchs_adam():
    """torch's fused CPU Adam reads a tensor's memory as if it were contiguous: a transposed
    gradient or parameter would step the wrong elements. ``adam_step`` makes gradients contiguous
    and ``make_adam`` keeps a non-contiguous parameter out of the fused kernel."""
    from p2pfed.learning.training import TrainingConfig, adam_step, make_adam
    config = TrainingConfig(lr=0.01, weight_decay=0.01, optimizer="adam")
    streams = torch.Generator().manual_seed(1)
    for start in (torch.randn(4, 5, generator=streams), torch.randn(5, 4, generator=streams).t()):
        ours, theirs = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
        adam = make_adam([ours], config)
        reference = torch.optim.Adam([theirs], lr=0.01, weight_decay=0.01, foreach=False)
        for _ in range(3):
            grad = torch.randn(5, 4, generator=streams).t()
            adam_step(adam, [ours], (grad,))
            theirs.grad = grad.contiguous()
            reference.step()
        torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=0, atol=1e-6)
        assert ours.grad is None


def adam_steps(adam: torch.optim.Optimizer, p: torch.nn.Parameter) -> int:
    return int(adam.state[p]["step"])


@pytest.mark.parametrize("method", ["fedali", "fedpews"])
def test_training_optimizer_adam_trains_every_device_with_adam(tmp_path, method):
    """FedAli's paper trains every method with Adam (Sec. 5.1): FedAli's aligned network through
    its job, FedPeWS through its own masked steps."""
    adam = [*SMALL, "rounds=2", f"algorithm.name={method}", "training.optimizer=adam", "training.lr=0.001"]
    if method == "fedpews":
        adam = [*(a for a in adam if not a.startswith("algorithm.prototypes")), "algorithm.warmup_rounds=1"]
    loaded = load_scenario(SCENARIO, adam)
    algo = build_algorithms(loaded, loaded.federation)[0]
    assert algo.ctx.training.optimizer == "adam"
    if method == "fedali":
        job = algo.train(0)
        assert job.config.optimizer == "adam" and not job.plain
    summary = run_scenario(loaded, tmp_path, progress=False)
    sgd = run_scenario(load_scenario(SCENARIO, [a for a in adam if "optimizer" not in a]), tmp_path / "sgd",
                       progress=False)
    assert summary["final"]["loss_mean"] != sgd["final"]["loss_mean"]
    if method == "fedali":
        assert 0 <= summary["algorithm_stats"]["plan_marginal_error"] < 1


def test_adam_refuses_sgds_momentum_in_one_line():
    with pytest.raises(ScenarioError, match="training.momentum: SGD's momentum; with optimizer: adam leave it at 0"):
        load_scenario(SCENARIO, [*SMALL, "training.optimizer=adam", "training.momentum=0.9"])
