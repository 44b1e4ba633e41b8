"""Whole opportunistic runs from scenario files: every contact source, results files, bad input."""

import csv
import json

import numpy as np
import pytest
import torch

from p2pfed.algorithms.base import Payload, Received
from p2pfed.cli.main import main
from p2pfed.engine.runner import run_scenario
from p2pfed.scenario.build import build_algorithms
from p2pfed.scenario.loader import load_scenario, with_algorithm
from p2pfed.scenario.errors import ScenarioError
from p2pfed.testing import whole_share, fuse_once, train_once

SMALL = ["dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=20", "model.hidden=[16,32]",
         "contacts.duration_s=600", "asynchronous.train_period_s=60", "evaluation.every_s=150"]
KINDS = {
    "static": ["contacts.kind=static"],
    "random-waypoint": ["contacts.kind=random-waypoint", "contacts.area_m=[100,100]", "contacts.range_m=30"],
    "poisson": ["contacts.kind=poisson", "contacts.mean_intercontact_s=200", "contacts.mean_duration_s=20"],
}


def _set(items):
    return sum((["--set", s] for s in items), [])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_contact_source_runs_from_a_scenario(repo_root, tmp_path, kind):
    out = tmp_path / kind
    code = main(["run", str(repo_root / "scenarios" / "synthetic-small.yaml"), "--out", str(out), "--quiet",
                 *_set(SMALL + KINDS[kind] + ["forwarding.enabled=true", "contacts.bandwidth_bps=2e5"])])
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    comm = s["comm"]
    assert s["contacts"]["kind"] == kind and s["contacts"]["contacts"] > 0
    assert comm["transfers_started"] >= comm["transfers_completed"] + comm["transfers_aborted"]  # rest in flight
    assert comm["transfers_completed"] > 0 and comm["bytes_sent_total"] > 0
    # delivery times of the messages that came straight from their sender (forwarded copies apart),
    # at least a message's latency, and within the run
    delays = comm["delivery_time_s"]
    assert 0 < delays["count"] <= comm["transfers_completed"] and delays["negative"] == 0
    assert 0.05 <= delays["median"] <= delays["p95"] <= delays["max"] <= 600
    rows = list(csv.DictReader((out / "rounds.csv").open()))
    assert [float(r["sim_time_s"]) for r in rows] == [150.0, 300.0, 450.0, 600.0]
    assert [int(r["round"]) for r in rows] == [1, 2, 3, 4]
    devices = list(csv.DictReader((out / "devices.csv").open()))
    assert sum(int(d["bytes_wasted"]) for d in devices) == comm["bytes_wasted"]
    assert sum(int(d["transfers_aborted"]) for d in devices) == comm["transfers_aborted"]
    assert s["asynchronous"]["trainings_per_device"] == s["rounds"] == 10.0
    assert (out / "contacts.png").stat().st_size > 1000


def test_algorithms_see_their_current_neighbours(repo_root):
    from p2pfed.network.contacts import ContactPlan, make_contact
    from p2pfed.engine.opportunistic import AsyncSchedule, OpportunisticSimulation
    from p2pfed.results.recorder import Recorder

    loaded = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml", SMALL[:3])
    algos = build_algorithms(loaded, loaded.federation)
    plan = ContactPlan(6, [make_contact(0, 1, 10.0, 20.0, 1e6, 0.0), make_contact(0, 4, 15.0, 30.0, 1e6, 0.0)])
    sim = OpportunisticSimulation(algos, plan, AsyncSchedule(duration_s=40.0, train_period_s=100.0,
                                                             eval_every_s=40.0),
                                  Recorder(6), np.random.default_rng(0), max_message_bytes=2**22)
    seen = []

    def watch():
        for t in (5.0, 12.0, 17.0, 25.0, 35.0):
            yield sim.env.timeout(t - sim.env.now)
            seen.append(algos[0].ctx.neighbours())

    sim.env.process(watch())
    sim.run()
    assert seen == [[], [1], [1, 4], [4], []]


def test_trace_scenario_and_churn(repo_root, tmp_path):
    path = repo_root / "scenarios" / "opportunistic-trace-example.yaml"
    s = run_scenario(load_scenario(path, ["churn.mean_online_s=300", "churn.mean_offline_s=100"]), progress=False)
    assert s["contacts"] == {"kind": "trace", "contacts": 7, "mean_contact_s": pytest.approx(187.1429),
                             "contacts_per_device_per_hour": 10.5}
    assert 0 < s["asynchronous"]["offline_fraction"] < 1
    again = run_scenario(load_scenario(path, ["churn.mean_online_s=300", "churn.mean_offline_s=100"]),
                         progress=False)
    assert (s["final"], s["comm"]) == (again["final"], again["comm"])


def test_short_contacts_abort_big_messages_and_prototypes_still_arrive(repo_root):
    path = repo_root / "scenarios" / "synthetic-small.yaml"
    base = SMALL + KINDS["poisson"] + ["contacts.bandwidth_bps=2e4", "contacts.mean_duration_s=3"]
    s = run_scenario(load_scenario(path, base), progress=False)
    assert s["comm"]["transfers_aborted"] > 0 and s["comm"]["bytes_wasted"] > 0
    assert s["comm"]["transfers_completed"] > 0
    whole = run_scenario(load_scenario(path, base + ["asynchronous.send_policy=whole"]), progress=False)
    assert whole["comm"]["transfers_completed"] < s["comm"]["transfers_completed"]


def test_no_contacts_section_keeps_synchronous_rounds(repo_root):
    s = run_scenario(load_scenario(repo_root / "scenarios" / "synthetic-small.yaml",
                                   ["rounds=2", *SMALL[:3]]), progress=False)
    assert "contacts" not in s and s["rounds"] == 2
    comm = s["comm"]   # a run stops at the end of its last round: the last sends may still be in flight
    assert comm["transfers_started"] == comm["messages_sent"] >= comm["transfers_completed"] > 0
    assert comm["transfers_aborted"] == 0 and comm["bytes_wasted"] == 0


def test_bad_trace_line_exits_2_naming_file_and_line(repo_root, tmp_path, capsys):
    trace = tmp_path / "bad.txt"
    trace.write_text("# a b start end\n0 1 0 10\n1 2 ten 20\n")
    code = main(["run", str(repo_root / "scenarios" / "opportunistic-trace-example.yaml"), "--quiet",
                 "--out", str(tmp_path / "o"), "--set", f"contacts.file={trace}"])
    assert code == 2
    assert f"{trace}:3: start must be a number, got 'ten'" in capsys.readouterr().err


def test_trace_with_too_few_ids_is_a_clear_error(repo_root, tmp_path, capsys):
    code = main(["run", str(repo_root / "scenarios" / "opportunistic-trace-example.yaml"), "--quiet",
                 "--out", str(tmp_path / "o"), "--set", "dataset.synthetic.num_devices=5"])
    assert code == 2
    assert "has 4 ids but the scenario has 5 devices" in capsys.readouterr().err


def test_contact_keys_are_validated(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("contacts:\n  kind: trace\nchurn:\n  mean_online_s: 10\nasynchronous:\n"
                 "  train_period_s: 10\n  train_jitter_s: 10\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(f)
    text = "\n".join(err.value.problems)
    assert "contacts.file: is required when contacts.kind is 'trace'" in text
    assert "churn.mean_offline_s: is required when churn.mean_online_s is set" in text
    assert "asynchronous.train_jitter_s: must be below" in text
    f.write_text("contacts:\n  kind: trace\n  file: nope.txt\n  format: one\n")
    with pytest.raises(ScenarioError, match="contacts.file: file not found"):
        load_scenario(f)


def test_fedsub_parts_fuse_exactly_like_the_whole_payload(repo_root):
    loaded = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml", SMALL[:3])
    dataset = loaded.federation

    def fused(split: bool):
        algos = build_algorithms(loaded, dataset)
        for a in algos:
            train_once(a, 0)
        shares = [a.share(0) if split else [whole_share(a, 0)] for a in algos]
        me = algos[0]
        for sender, parts in enumerate(shares[1:], start=1):
            for p in parts:
                me.receive(Received(sender, 0, 0.0, 1.0, Payload(dict(p.meta), dict(p.tensors))))
        fuse_once(me, 0, 1.0)
        return [p.detach().clone() for p in me.ctx.model.parameters()]

    for a, b in zip(fused(False), fused(True)):
        assert torch.equal(a, b)


def test_fedsub_peer_known_only_by_prototypes_does_not_change_parameters(repo_root):
    loaded = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml", SMALL[:3])
    algos = build_algorithms(loaded, loaded.federation)
    for a in algos:
        train_once(a, 0)
    me = algos[0]
    me.share(0)
    before = [p.detach().clone() for p in me.ctx.model.parameters()]
    for sender in range(1, len(algos)):
        protos = algos[sender].share(0)[0]
        assert protos.meta["part"] == "prototypes" and set(protos.tensors) == {"prototypes"}
        me.receive(Received(sender, 0, 0.0, 1.0, protos))
    fuse_once(me, 0, 1.0)
    assert all(torch.equal(a, b) for a, b in zip(before, me.ctx.model.parameters()))
    assert not any(r.fresh for r in me.cache.values())


def test_every_registered_method_runs_over_contacts(repo_root):
    from p2pfed.algorithms import ALGORITHMS

    base = load_scenario(repo_root / "scenarios" / "opportunistic-trace-example.yaml",
                         ["contacts.duration_s=600", "evaluation.every_s=600"])
    for name in sorted(ALGORITHMS):
        s = run_scenario(with_algorithm(base, name), progress=False)
        assert s["asynchronous"]["trainings_per_device"] == 10.0, name
        # fedhome's default 10 fine-tune rounds cover all 10 trainings: it never sends, by design
        assert (s["comm"]["transfers_started"] > 0) == (name not in ("local", "fedhome")), name


def test_fedsub_steps_finishing_in_one_batch_window_sweep_together_and_match_one_at_a_time(repo_root, tmp_path,
                                                                                       monkeypatch):
    """A real FedSub run over contacts whose steps finish in 40 s windows, without the helper
    process: the K sweeps of the steps finishing together go to one clustering call (problems
    of equal size then stack), and the run equals the same run computed one device at a time
    (``engine.batched_training=false``) to float rounding."""
    from p2pfed.algorithms.fedsub import clustering

    calls = []
    real = clustering.choose_k_by_dbi_many
    monkeypatch.setattr(clustering, "choose_k_by_dbi_many",
                        lambda sets, **kw: calls.append(len(sets)) or real(sets, **kw))
    overrides = SMALL + KINDS["random-waypoint"] + ["asynchronous.batch_window_s=40", "engine.offload=false"]
    loaded = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml", overrides)
    batched = run_scenario(loaded, tmp_path / "batched", progress=False)
    classes = loaded.scenario.dataset.synthetic.num_classes
    assert batched["asynchronous"]["devices_per_batch"] > 1.5
    assert max(calls) > classes          # problems of several devices in one call
    calls.clear()
    alone = run_scenario(load_scenario(repo_root / "scenarios" / "synthetic-small.yaml",
                                       [*overrides, "engine.batched_training=false"]),
                         tmp_path / "alone", progress=False)
    assert max(calls) <= classes
    assert alone["asynchronous"] == batched["asynchronous"]
    assert alone["algorithm_stats"]["k_mean"] == batched["algorithm_stats"]["k_mean"]
    f1 = [[float(r["f1_macro_mean"]) for r in csv.DictReader((tmp_path / run / "rounds.csv").open())]
          for run in ("batched", "alone")]
    np.testing.assert_allclose(f1[0], f1[1], atol=1e-4)
