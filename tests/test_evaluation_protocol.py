"""The evaluation protocol (issue 14): when a device is evaluated in its round, the papers' 70/30
split in the reproduction scenarios, and dynamic classes returning to the training and the test
set together."""

from __future__ import annotations

import numpy as np
import pytest

from p2pfed.engine.runner import run_scenario
from p2pfed.engine.simulation import RoundSchedule, Simulation
from p2pfed.network.topology import build_topology
from p2pfed.results.files import read_csv
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import build_algorithms, build_class_schedule
from p2pfed.scenario.loader import load_scenario
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
SMALL = ["dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=20", "model.hidden=[16,32]",
         "rounds=5", "evaluation.every=1"]


def _losses(name: str, when: str, tmp_path) -> list[str]:
    out = tmp_path / f"{name}-{when}"
    run_scenario(load_scenario(SCENARIO, [*SMALL, f"algorithm.name={name}", f"evaluation.when={when}"]),
                 out, progress=False)
    return [row["loss_mean"] for row in read_csv(out / "rounds.csv")]


def test_after_fusion_evaluates_the_model_before_training_and_after_the_fusion(tmp_path):
    """Local training fuses nothing, so evaluating after the fusion of round r sees exactly the
    model evaluated after the training of round r-1. Gossip averaging fuses in between, so the
    two settings evaluate different models in the same run."""
    local_fused = _losses("local", "after-fusion", tmp_path)
    local_trained = _losses("local", "after-training", tmp_path)
    assert local_fused[1:] == local_trained[:-1]
    assert local_fused[0] != local_trained[0]          # round 0 after fusion: the untrained model
    gossip_fused, gossip_trained = (_losses("gossip-avg", "after-fusion", tmp_path),
                                    _losses("gossip-avg", "after-training", tmp_path))
    assert gossip_fused[0] == local_fused[0]           # same initial model, nothing fused yet
    assert all(f != t for f, t in zip(gossip_fused[1:], gossip_trained[:-1])), (gossip_fused, gossip_trained)


def test_after_fusion_is_the_default():
    assert load_scenario(SCENARIO).scenario.evaluation.when == "after-fusion"


@pytest.mark.parametrize("name", ["wisdm-static.yaml", "wisdm-dynamic.yaml"])
def test_reproduction_scenarios_use_the_papers_70_30_split(name):
    assert load_scenario(ROOT / "scenarios" / name).scenario.dataset.test_fraction == 0.3


def _spy_on_evaluations(test_classes: str):
    """Run a dynamic synthetic scenario; return the schedule and, per (device, round), the
    classes in the training set and in the test set the device was evaluated on."""
    loaded = load_scenario(SCENARIO, [*SMALL, "rounds=7", "algorithm.name=gossip-avg",
                                      "dynamic.devices_fraction=1.0", "dynamic.max_removed_fraction=0.75",
                                      "dynamic.return_every=2", f"dynamic.test_classes={test_classes}"])
    dataset = loaded.federation
    algos = build_algorithms(loaded, dataset)
    sched = build_class_schedule(loaded, dataset)
    seen: dict[tuple[int, int], tuple[set, set]] = {}
    for i, a in enumerate(algos):
        def spy(a=a, i=i, model=a.evaluated_model):   # asked once per evaluation, batched or not
            r = sum(1 for d, _ in seen if d == i)
            seen[i, r] = (set(a.ctx.y_train.unique().tolist()), set(a.ctx.y_test.unique().tolist()))
            return model()
        a.evaluated_model = spy
    sim = Simulation(algos, build_topology("complete", 6, seed=0), RoundSchedule(7, 10.0), Recorder(6),
                     np.random.default_rng(0), max_message_bytes=2**20, class_schedule=sched)
    sim.run()
    return sched, dataset, seen


def test_a_returning_class_comes_back_to_the_training_and_the_test_set_together():
    sched, dataset, seen = _spy_on_evaluations("visible")
    assert len(seen) == 6 * 7 and sched.removed
    for (i, r), (train, test) in seen.items():
        everything = set(np.unique(dataset.devices[i].y_test).tolist())
        visible = sched.visible(i, r)
        assert train == (set(np.unique(dataset.devices[i].y_train).tolist()) if visible is None else visible)
        assert test == (everything if visible is None else everything & visible), (i, r)
    device, hidden = next(iter(sched.removed.items()))
    first = hidden[0]
    assert first not in seen[device, 0][1] and first not in seen[device, 1][1]
    assert first in seen[device, 2][0] and first in seen[device, 2][1]   # back in both at round 2


def test_test_classes_all_keeps_the_test_set_complete():
    sched, dataset, seen = _spy_on_evaluations("all")
    for (i, r), (train, test) in seen.items():
        assert test == set(np.unique(dataset.devices[i].y_test).tolist())
    device = next(iter(sched.removed))
    assert seen[device, 0][0] < seen[device, 0][1]    # hidden from training, not from the test


@pytest.mark.parametrize("when", ["after-fusion", "after-training"])
def test_a_real_peer_evaluates_when_its_scenario_says(tmp_path, when):
    from p2pfed.peer.config import load_peer_config
    from p2pfed.peer.runtime import Peer
    from tests.peer_support import write_peer_files
    path = write_peer_files(tmp_path, n=2, secure=False, overrides=[f"evaluation.when={when}"])[0]
    peer = Peer(load_peer_config(path, insecure=True), insecure=True)
    try:
        assert peer.loop.evaluate_when == when
    finally:
        peer.close()


def _run(name: str, when: str, tmp_path, *extra: str) -> tuple[list[dict], list[dict], dict]:
    import json
    out = tmp_path / f"{name}-{when}-{len(extra)}"
    run_scenario(load_scenario(SCENARIO, [*SMALL, f"algorithm.name={name}", f"evaluation.when={when}", *extra]),
                 out, progress=False)
    return (read_csv(out / "rounds.csv"), read_csv(out / "devices.csv"),
            json.loads((out / "summary.json").read_text()))


@pytest.mark.parametrize("name", ["gossip-avg", "fedsub"])
def test_every_round_run_reports_both_protocols_and_scoring_one_does_not_change_the_other(name, tmp_path):
    """The headline follows ``evaluation.when``; the other point of the round is scored too, and
    is exactly what a run whose headline it is reports: scoring twice changes nothing a method
    does (the two runs' trajectories are one)."""
    fused_rounds, fused_devices, fused = _run(name, "after-fusion", tmp_path)
    trained_rounds, trained_devices, trained = _run(name, "after-training", tmp_path)
    for row in fused_rounds:
        assert row["f1_after_fusion_mean"] == row["f1_macro_mean"]
    for a, b in zip(fused_rounds, trained_rounds, strict=True):
        assert a["f1_after_training_mean"] == b["f1_macro_mean"] == b["f1_after_training_mean"]
        assert a["f1_after_fusion_mean"] == b["f1_after_fusion_mean"]
        assert a["bytes_sent_total"] == b["bytes_sent_total"]
    assert [d["f1_after_training"] for d in fused_devices] == [d["f1_macro"] for d in trained_devices]
    assert fused["evaluation"]["protocol"] == "after-fusion" and trained["evaluation"]["protocol"] == "after-training"
    assert fused["final"]["f1_after_training_mean"] == trained["final"]["f1_macro_mean"]
    # the two points differ (training moves the model), so the columns are not one number twice
    assert any(r["f1_after_fusion_mean"] != r["f1_after_training_mean"] for r in fused_rounds)
    # and without ``both`` only the headline is scored, with the same values
    alone_rounds, _, _ = _run(name, "after-fusion", tmp_path, "evaluation.both=false")
    assert "f1_after_training_mean" not in alone_rounds[0]
    assert [r["f1_macro_mean"] for r in alone_rounds] == [r["f1_macro_mean"] for r in fused_rounds]


def test_best_round_is_the_round_with_the_highest_mean_f1(tmp_path):
    rounds, _, summary = _run("gossip-avg", "after-fusion", tmp_path)
    best = max(rounds, key=lambda r: float(r["f1_macro_mean"]))
    assert summary["evaluation"]["best_round"] == int(best["round"])
    assert summary["evaluation"]["best_f1_macro_mean"] == float(best["f1_macro_mean"])


def test_both_protocols_survive_a_checkpoint_and_a_merge_and_old_checkpoints_still_load():
    from p2pfed.learning.training import Evaluation

    def recorder(devices: list[int]) -> Recorder:
        rec = Recorder(devices)
        for d in devices:
            rec.evaluated(d, 0, 1.0, Evaluation(0.5 + d / 10, 1.0, 0.6, 0.7), protocol="after-fusion")
            rec.evaluated(d, 0, 2.0, Evaluation(0.9, 0.5, 0.95, 0.9), protocol="after-training", primary=False)
        return rec

    whole = recorder([0, 1])
    assert Recorder.from_state(whole.state_dict()).rows == whole.rows
    assert Recorder.merge([recorder([0]), recorder([1])]).rows == whole.rows
    assert whole.rows[0]["f1_after_training_mean"] == 0.9 and whole.rows[0]["f1_present_mean"] == 0.7
    old = whole.state_dict()
    del old["protocols"]
    for ev in old["evaluations"].values():
        ev["values"] = [row[:3] for row in ev["values"]]    # saved before f1_present existed
    row = Recorder.from_state(old).rows[0]
    assert row["f1_macro_mean"] == whole.rows[0]["f1_macro_mean"] and np.isnan(row["f1_present_mean"])
    assert "f1_after_training_mean" not in row
