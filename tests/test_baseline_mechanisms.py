"""Each baseline's own mechanism fires in a real run, read from ``summary.json`` ``algorithm_stats``
(issue 14): FedHome fine-tunes its head on SMOTE-balanced representations (and never on hidden
classes), ProtoHAR and FedProto pull toward averaged prototypes, Ditto's personal model is not the
averaged one, FedPer/FedRep/ProtoHAR fuse the body and keep the head. (FedCLAR's clusters:
``test_device_loop.py``.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from p2pfed.algorithms.averaging.protohar import ProtoHAR
from p2pfed.engine.runner import run_scenario
from p2pfed.engine.simulation import RoundSchedule, Simulation
from p2pfed.network.topology import build_topology
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import build_algorithms, build_class_schedule
from p2pfed.scenario.loader import load_scenario
from tests.conftest import ROOT

# Digits split over 8 devices by a Dirichlet label split: class counts differ within a device,
# so SMOTE has something to balance.
ROUNDS = 4
DIGITS = ["dataset.partition.num_devices=8", "dataset.partition.alpha=0.5", "model.hidden=[16,16]",
          "training.epochs=1", "topology.kind=complete", f"rounds={ROUNDS}", f"evaluation.every={ROUNDS}"]
_RUNS: dict[tuple[str, ...], dict] = {}


def _stats(tmp_path, name: str, *extra: str) -> dict:
    """``algorithm_stats`` of a real run's summary.json (runs shared between tests)."""
    key = (name, *extra)
    if key not in _RUNS:
        loaded = load_scenario(ROOT / "scenarios" / "digits-dirichlet.yaml",
                               [*DIGITS, f"algorithm.name={name}", *extra])
        run_scenario(loaded, tmp_path, progress=False)
        _RUNS[key] = json.loads((tmp_path / "summary.json").read_text())["algorithm_stats"]
    return _RUNS[key]


def test_fedhome_fine_tunes_only_the_head_on_balanced_representations(tmp_path):
    stats = _stats(tmp_path, "fedhome", "algorithm.fine_tune_rounds=2")
    assert stats["fine_tuned_rounds"] == 2
    assert stats["smote_added_samples"] > 0 and stats["balanced_classes"] >= 2, stats
    assert stats["head_change_l2"] > 0 and stats["body_change_l2"] == 0, stats


def test_fedhome_input_variant_fine_tunes_the_whole_model(tmp_path):
    stats = _stats(tmp_path, "fedhome", "algorithm.fine_tune_rounds=2", "algorithm.balance=input")
    assert stats["fine_tuned_rounds"] == 2 and stats["smote_added_samples"] > 0
    assert stats["body_change_l2"] > 0, stats


def test_fedhome_never_balances_hidden_classes_and_takes_a_returning_one():
    """Dynamic data: the fine-tune set holds only the classes visible in that round; one class
    comes back in the middle of the fine-tune and joins it."""
    loaded = load_scenario(ROOT / "scenarios" / "digits-dirichlet.yaml",
                           [*DIGITS, "rounds=8", "algorithm.name=fedhome", "algorithm.fine_tune_rounds=4",
                            "model.hidden=[8]",
                            "dynamic.devices_fraction=1.0", "dynamic.max_removed_fraction=0.7",
                            "dynamic.return_every=6"])
    dataset = loaded.federation
    algos = build_algorithms(loaded, dataset)
    sched = build_class_schedule(loaded, dataset)
    assert sched is not None and sched.removed
    balanced: dict[tuple[int, int], set[int]] = {}
    for i, a in enumerate(algos):
        def spy(r, a=a, i=i, train=a.train):
            train(r)
            if a.balanced is not None:
                balanced[i, r] = set(a.balanced[1].unique().tolist())
        a.train = spy
    sim = Simulation(algos, build_topology("complete", 8, seed=0), RoundSchedule(8, 10.0), Recorder(8),
                     np.random.default_rng(0), max_message_bytes=2**22, class_schedule=sched)
    sim.run()
    assert {r for _, r in balanced} == {4, 5, 6, 7}
    for (i, r), classes in balanced.items():
        held = set(np.unique(dataset.devices[i].y_train).tolist())
        visible = sched.visible(i, r)
        assert classes == (held if visible is None else set(visible)), (i, r)
    device, hidden = next(iter(sched.removed.items()))
    assert hidden[0] not in balanced[device, 5] and hidden[0] in balanced[device, 6]


def test_protohar_runs_with_the_reference_defaults():
    options = ProtoHAR.Options()
    assert (options.head_epochs, options.proto_weight) == (1, 0.1)


# protohar's run is in the slow set .ci/run also runs (the default suite stays under 10 minutes)
@pytest.mark.parametrize("name", [pytest.param("protohar", marks=pytest.mark.slow), "fedproto"])
def test_prototype_methods_pull_toward_averaged_prototypes(tmp_path, name):
    stats = _stats(tmp_path / "on", name)
    # Every training after the first fusion uses the term: all rounds but the first.
    assert stats["prototype_pulls"] == ROUNDS - 1, stats
    assert stats["averaged_prototype_classes"] > 0 and stats["peer_only_prototype_classes"] > 0, stats
    off = _stats(tmp_path / "off", name, "algorithm.proto_weight=0")
    assert off["prototype_pulls"] == 0


@pytest.mark.parametrize("name", ["fedper", "fedrep", "protohar"])
def test_head_methods_fuse_the_body_and_keep_the_head_local(tmp_path, name):
    stats = _stats(tmp_path / "on", name)
    assert stats["fusions_changing_body"] == ROUNDS - 1 and stats["fusions_changing_head"] == 0, stats


def test_ditto_evaluates_a_personal_model_that_is_not_the_averaged_one(tmp_path):
    assert _stats(tmp_path, "ditto")["personal_global_l2"] > 0
