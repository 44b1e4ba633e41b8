"""SAFL without a server: Network Slimming reaches the round's rate, pruned units can come back,
only the sub-model travels, clusters follow planted data and guide which units survive, Hermes
keeps personal parameters, and the mechanism fires in both runtimes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from p2pfed.algorithms import ArtifactError
from p2pfed.algorithms.safl.method import rate_schedule
from p2pfed.algorithms.safl.wire import decode_submodel, encode_submodel
from p2pfed.cli.main import main
from p2pfed.data.dataset import DeviceData, FederatedDataset
from p2pfed.device import full_model_bytes
from p2pfed.engine.runner import run_scenario
from p2pfed.algorithms.safl.heterogeneous import SubModel, fuse_cluster, preserve_personal
from p2pfed.learning.model import MLP
from p2pfed.learning.training import TrainingConfig, train_epochs
from p2pfed.algorithms.safl.slimming import (
    element_masks,
    kept_parameter_fraction,
    pruned_fraction,
    sub_model_gradient_masks,
    slim_masks,
    zero_pruned_factors,
)
from p2pfed.scenario.build import build_algorithm
from p2pfed.scenario.loader import load_scenario
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.threads import apply_torch_threads
from p2pfed.transport import Message, encode
from p2pfed.testing import train_once
from tests.conftest import ROOT
from tests.hand_driven import clique_rounds

SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
SMALL = ["dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=20", "model.hidden=[16,32]",
         "algorithm.name=safl"]


def _gated(seed: int = 0, hidden=(6, 5)) -> MLP:
    torch.manual_seed(seed)
    return MLP(4, list(hidden), 3, unit_gates=True)


# -- Network Slimming and model recovery ---------------------------------------------------------
def test_slimming_prunes_the_smallest_factors_globally_to_the_rate():
    factors = [torch.tensor([0.9, -0.05, 0.3, 0.01, 0.8]), torch.tensor([0.02, -0.7, 0.6, 0.04, 0.5])]
    masks = slim_masks(factors, 0.4)
    assert pruned_fraction(masks) == pytest.approx(0.4)
    pruned = {(li, i) for li, m in enumerate(masks) for i in np.flatnonzero(~m)}
    assert pruned == {(0, 3), (1, 0), (1, 3), (0, 1)}   # the four smallest |factor|, across layers
    # A layer whose factors are all tiny still keeps its largest one.
    tiny = slim_masks([torch.full((4,), 1e-3), torch.ones(4)], 0.6)
    assert tiny[0].sum() == 1 and pruned_fraction(tiny) == pytest.approx(5 / 8)


def test_rate_schedule_steps_up_to_the_target():
    assert rate_schedule(0.5, 0.1) == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]   # SAFL Sec. IV-C
    assert rate_schedule(0.25, 0.1) == [0.0, 0.1, 0.2, 0.25]
    assert rate_schedule(0.0, 0.1) == [0.0]


def test_a_pruned_unit_stays_out_while_frozen_and_can_come_back_after_recovery():
    model = _gated()
    masks = slim_masks([g.detach() for g in model.gates], 0.5)
    zero_pruned_factors(model, masks)
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    before = model(x).detach()
    frozen = sub_model_gradient_masks(model, masks)
    gates = [g.detach().clone() for g in model.gates]
    train_epochs(model, x, y, TrainingConfig(epochs=3, batch_size=8, lr=0.5), torch.Generator().manual_seed(0),
                 gradient_masks=frozen)
    for g, old, m in zip(model.gates, gates, masks):
        assert torch.equal(g.detach()[torch.as_tensor(~m)], old[torch.as_tensor(~m)])   # pruned units do not train
        assert not torch.equal(g.detach()[torch.as_tensor(m)], old[torch.as_tensor(m)])
    before = model(x).detach()
    torch.nn.functional.cross_entropy(model(x), y).backward()  # recovered: factor 0 still learns
    assert any(bool((g.grad[torch.as_tensor(~m)] != 0).any()) for g, m in zip(model.gates, masks))
    # Pruning through the gates is exact: the dense model equals the sub-model on the wire.
    decoded = decode_submodel(model, encode_submodel(model, masks))
    out = torch.func.functional_call(model, decoded.values, (x,))
    torch.testing.assert_close(out, before)


def test_only_the_sub_model_travels_and_decodes_in_place():
    model = _gated(hidden=(64, 64))
    masks = slim_masks([g.detach() for g in model.gates], 0.5)
    zero_pruned_factors(model, masks)
    payload = encode_submodel(model, masks, num_samples=3)
    sub = decode_submodel(model, payload)
    assert [m.tolist() for m in sub.masks] == [m.tolist() for m in masks]
    held = element_masks(model, masks)
    for name, p in model.named_parameters():
        torch.testing.assert_close(sub.values[name][held[name]], p.detach()[held[name]])
        assert torch.all(sub.values[name][~held[name]] == 0)
    size = len(encode(Message(kind="safl/submodel", sender=0, round=0, sent_at=0.0, meta=payload.meta,
                              tensors=payload.tensors)))
    kept = kept_parameter_fraction(model, masks)
    assert kept < 0.5
    assert size / full_model_bytes(model) < kept + 0.1   # bytes follow the kept parameters


def test_a_structure_seen_before_gives_the_element_masks_built_for_it():
    """Element masks are kept per model for the structures it has met: the same structure gives
    the same masks, another structure (or layout) its own, as built afresh."""
    model = _gated(hidden=(6, 4))
    first = [np.array([1, 0, 1, 1, 0, 1], dtype=bool), np.array([1, 1, 0, 1], dtype=bool)]
    other = [np.array([1, 1, 1, 1, 0, 0], dtype=bool), np.array([0, 1, 1, 1], dtype=bool)]
    held = element_masks(model, first)
    held.pop("layers.0.weight")                         # the caller's dict is its own
    again = element_masks(model, [m.copy() for m in first])
    assert all(again[n] is element_masks(model, first)[n] for n in again)   # built once
    def rows_and_columns(keep):
        return torch.as_tensor(keep[1])[:, None] & torch.as_tensor(keep[0])[None, :]
    assert torch.equal(again["layers.1.weight"], rows_and_columns(first))
    assert torch.equal(element_masks(model, other)["layers.1.weight"], rows_and_columns(other))
    wider = _gated(hidden=(6, 5))
    assert element_masks(wider, [first[0], np.ones(5, dtype=bool)])["layers.2.weight"].shape[1] == 5


# -- the two fusions -----------------------------------------------------------------------------
def _sub(model: MLP, keep: list[list[int]], value: float) -> SubModel:
    masks = [np.array(k, dtype=bool) for k in keep]
    held = element_masks(model, masks)
    return SubModel(masks, {n: torch.where(held[n], torch.full_like(p, value), torch.zeros_like(p))
                            for n, p in model.named_parameters()})


def test_cluster_fusion_keeps_the_most_frequent_units_and_averages_their_holders():
    model = _gated(hidden=(4, 2))
    members = [_sub(model, [[1, 1, 0, 0], [1, 1]], 1.0), _sub(model, [[1, 0, 1, 0], [1, 1]], 2.0),
               _sub(model, [[1, 1, 0, 1], [1, 0]], 3.0)]
    fused = fuse_cluster(model, members, rate=1 / 3)       # 6 hidden units, prune 2
    assert fused.masks[0].tolist() == [True, True, False, False]   # counts 3, 2, 1, 1
    assert fused.masks[1].tolist() == [True, True]                 # counts 3, 2
    assert fused.values["gates.0"][0] == pytest.approx(2.0)         # all three hold unit 0
    assert fused.values["gates.0"][1] == pytest.approx(2.0)         # members 1 and 3
    assert fused.values["gates.1"][1] == pytest.approx(1.5)         # members 1 and 2
    assert torch.all(fused.values["layers.0.weight"][2:] == 0)      # pruned rows are gone


def test_hermes_averages_overlapping_parameters_and_keeps_personal_ones():
    model = _gated(hidden=(4, 2))
    own = [np.array([1, 1, 0, 0], dtype=bool), np.array([1, 1], dtype=bool)]
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(1.0)
    peer = _sub(model, [[1, 0, 1, 0], [1, 1]], 3.0)
    names = [n for n, _ in model.named_parameters() if not n.startswith("gates.")]
    shared = preserve_personal(model, own, 1.0, [(peer, 1.0)], names)
    w = model.layers[0].weight.detach()
    assert torch.all(w[0] == 2.0)           # unit 0 held by both: averaged
    assert torch.all(w[1] == 1.0)           # unit 1 only the device's: kept
    assert torch.all(w[2:] == 1.0)          # not in the device's structure: untouched
    assert model.layers[1].weight[0, 0] == 2.0 and model.layers[1].weight[0, 1] == 1.0
    assert torch.all(model.gates[0] == 1.0)  # factors stay local
    assert 0 < shared < 1


# -- clusters on planted data ---------------------------------------------------------------------
def _planted(seed: int = 0, devices: int = 8, features: int = 12, classes: int = 3, n: int = 200) -> FederatedDataset:
    """Two planted groups (even and odd devices) labelling the same inputs by different rules."""
    rng = np.random.default_rng(seed)
    rules = [rng.normal(size=(features, classes)) for _ in range(2)]
    devs = []
    for d in range(devices):
        x = rng.normal(size=(n, features)).astype(np.float32)
        y = (x @ rules[d % 2]).argmax(1).astype(np.int64)
        cut = 3 * n // 4
        devs.append(DeviceData(d, f"planted-{d}", x[:cut], y[:cut], x[cut:], y[cut:]))
    return FederatedDataset("planted", features, classes, [str(c) for c in range(classes)], devs)


def _run_clique(extra: list[str], rounds: int = 8):
    loaded = load_scenario(SCENARIO, ["algorithm.name=safl", "model.hidden=[24,24]", "training.lr=0.2",
                                      "training.epochs=2", f"rounds={rounds}", "algorithm.target_rate=0.5", *extra])
    dataset = _planted()
    algos = [build_algorithm(loaded, dataset, i) for i in range(len(dataset.devices))]
    apply_torch_threads(loaded.scenario.engine.torch_threads)   # as the runtimes do
    clique_rounds(algos, range(rounds))
    return algos


def _mean_jaccard(algos, same: bool) -> float:
    units = [np.concatenate(a.masks) for a in algos]
    pairs = [(i, j) for i in range(len(algos)) for j in range(i + 1, len(algos))
             if (algos[i].cluster == algos[j].cluster) == same]
    return float(np.mean([(units[i] & units[j]).sum() / (units[i] | units[j]).sum() for i, j in pairs]))


def test_clusters_follow_planted_groups_and_guide_which_units_are_kept():
    guided = _run_clique([])
    clusters = [a.cluster for a in guided]
    assert len(set(clusters[0::2])) == 1 and len(set(clusters[1::2])) == 1 and clusters[0] != clusters[1], clusters
    assert all(pruned_fraction(a.masks) == pytest.approx(0.5, abs=1 / 48) for a in guided)
    within, across = _mean_jaccard(guided, True), _mean_jaccard(guided, False)
    assert within > across + 0.2, (within, across)
    # The pull toward the cluster's factors (mu) is what makes cluster-mates keep the same units.
    unguided = _run_clique(["algorithm.mu=0"])
    assert within > _mean_jaccard(unguided, True) + 0.1


# -- real runs ------------------------------------------------------------------------------------
def test_the_mechanism_fires_in_a_simulation_run(tmp_path):
    summary = run_scenario(load_scenario(SCENARIO, SMALL + ["rounds=7"]), tmp_path, progress=False)
    stats = json.loads((tmp_path / "summary.json").read_text())["algorithm_stats"]
    assert stats == summary["algorithm_stats"]
    assert stats["pruning_rate"] == pytest.approx(0.3, abs=1 / 48)      # reached the target
    assert stats["model_size_kept"] < 0.75
    assert stats["stage_two"] == 1.0 and stats["overlap_shared"] > 0.5  # Hermes averaged overlaps
    assert stats["cluster_candidates"] >= 1
    assert sum(stats["cluster_share"].values()) == pytest.approx(1.0)
    # Only sub-models travel: a message is smaller than the full model.
    assert summary["comm"]["bytes_per_message_vs_full_model"] < 0.85


def test_the_mechanism_fires_under_contacts(tmp_path):
    out = tmp_path / "contacts"
    sets = SMALL + ["contacts.kind=poisson", "contacts.mean_intercontact_s=100", "contacts.mean_duration_s=30",
                    "contacts.duration_s=600", "asynchronous.train_period_s=60", "evaluation.every_s=200"]
    assert main(["run", str(SCENARIO), "--out", str(out), "--quiet", *sum((["--set", s] for s in sets), [])]) == 0
    s = json.loads((out / "summary.json").read_text())
    stats = s["algorithm_stats"]
    assert s["contacts"]["kind"] == "poisson" and s["comm"]["transfers_completed"] > 0
    assert stats["pruning_rate"] == pytest.approx(0.3, abs=1 / 48) and stats["stage_two"] > 0
    assert stats["cluster_candidates"] > 0


def test_a_schedule_longer_than_the_run_is_refused_naming_the_option():
    with pytest.raises(ScenarioError, match="algorithm.target_rate: stage one needs 6 rounds"):
        load_scenario(SCENARIO, SMALL + ["rounds=4", "algorithm.target_rate=0.5"])
    with pytest.raises(ScenarioError, match="algorithm.mu"):
        load_scenario(SCENARIO, SMALL + ["algorithm.mu=-1"])


def test_a_malformed_share_is_refused():
    loaded = load_scenario(SCENARIO, SMALL)
    algo = build_algorithm(loaded, loaded.federation, 0)
    train_once(algo, 0)
    good = algo.share(0)
    algo.check(good)
    for meta, match in (({"cluster": 5}, "cluster"), ({"rate": 1.0}, "rate"), ({"stage": 3}, "stage")):
        bad = type(good)({**good.meta, **meta}, good.tensors)
        with pytest.raises(ArtifactError, match=match):
            algo.check(bad)
    wrong = dict(good.tensors, **{"gates.0": good.tensors["gates.0"][:-1]})
    with pytest.raises(ArtifactError, match="gates.0"):
        algo.check(type(good)(good.meta, wrong))
