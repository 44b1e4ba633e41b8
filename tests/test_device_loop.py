"""The one device loop: every method continues exactly after a checkpoint, FedCLAR clusters in
the order that runs, the intake checks what every runtime relies on, and layers point one way."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from p2pfed.algorithms import ALGORITHMS, Payload
from p2pfed.learning.training import evaluate
from p2pfed.device import (
    Held, Intake, IntakeRules, encode_share, load_checkpoint, merge_parts, save_checkpoint)
from p2pfed.engine.runner import Checkpointing, run_scenario
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import build_algorithm
from p2pfed.scenario.loader import load_scenario
from p2pfed.testing import fuse_once, train_once
from tests.conftest import ROOT
from tests.hand_driven import clique_rounds

SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
# Six devices, slow links (some transfers are still in flight at a round boundary), partial
# participation (the participation stream is exercised): every piece of state has to survive.
SMALL = ["dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=16", "model.hidden=[16,32]",
         "rounds=6", "engine.participation=0.8", "topology.bandwidth_bps=2.5e3"]
# Options that make each method's own mechanism fire within six rounds.
FIRES_EARLY = {"fedclar": ["algorithm.cluster_round=2", "algorithm.fine_tune_rounds=1"],
               "fedhome": ["algorithm.fine_tune_rounds=2"],
               # the warmup spans the checkpoint at round 3 and ends after it
               "fedpews": ["algorithm.warmup_rounds=4"], "fedpews-fixed": ["algorithm.warmup_rounds=4"]}


def _loaded(name: str, extra: list[str] = ()):
    return load_scenario(SCENARIO, SMALL + [f"algorithm.name={name}"] + FIRES_EARLY.get(name, []) + list(extra))


def _comparable(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in ("wall_time_s",)}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_simulation_stopped_and_restored_ends_bit_identical(name, tmp_path):
    whole = run_scenario(_loaded(name), tmp_path / "whole", progress=False)
    ckpt = Checkpointing(tmp_path / "run.ckpt", every=1, stop_after_round=3)
    assert run_scenario(_loaded(name), None, progress=False, checkpointing=ckpt) is None
    saved = torch.load(ckpt.path, weights_only=True)["state"]
    assert saved["next_round"] == 3
    resumed = run_scenario(_loaded(name), tmp_path / "resumed", progress=False,
                           checkpointing=Checkpointing(ckpt.path))
    assert _comparable(resumed) == _comparable(whole)
    assert (tmp_path / "resumed" / "rounds.csv").read_text() == (tmp_path / "whole" / "rounds.csv").read_text()
    assert (tmp_path / "resumed" / "devices.csv").read_text() == (tmp_path / "whole" / "devices.csv").read_text()


def test_the_restore_test_crosses_a_boundary_with_messages_in_flight(tmp_path):
    ckpt = Checkpointing(tmp_path / "run.ckpt", stop_after_round=3)
    run_scenario(_loaded("gossip-avg"), None, progress=False, checkpointing=ckpt)
    state = torch.load(ckpt.path, weights_only=True)["state"]
    assert state["in_flight"], "no message in flight at the boundary: the restore test would not cover links"


def test_a_checkpoint_of_another_scenario_is_refused(tmp_path):
    ckpt = Checkpointing(tmp_path / "run.ckpt", stop_after_round=2)
    run_scenario(_loaded("local"), None, progress=False, checkpointing=ckpt)
    with pytest.raises(ValueError, match="run.ckpt: written for another scenario"):
        run_scenario(_loaded("local", ["training.lr=0.01"]), None, progress=False, checkpointing=ckpt)
    ckpt.path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="run.ckpt: unreadable checkpoint"):
        run_scenario(_loaded("local"), None, progress=False, checkpointing=ckpt)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_method_state_round_trips_through_a_checkpoint_file(name, tmp_path):
    """Everything a method keeps between rounds survives save/load: the next step is identical."""
    loaded = _loaded(name)
    dataset = loaded.federation
    algos = [build_algorithm(loaded, dataset, i) for i in range(3)]
    clique_rounds(algos, range(3))   # a few rounds of a 3-device clique, by hand, in the loop's order
    save_checkpoint(tmp_path / "a.ckpt", "test", "fp", algos[0].state_dict())
    twin = build_algorithm(loaded, dataset, 0)
    twin.load_state_dict(load_checkpoint(tmp_path / "a.ckpt", "test", "fp"))
    for a in (algos[0], twin):
        if a.has_new():
            fuse_once(a, 3, 3.0)
        train_once(a, 3)
    for (k, v), (_, w) in zip(algos[0].ctx.model.state_dict().items(), twin.ctx.model.state_dict().items()):
        assert torch.equal(v, w), k
    ones, twos = (merge_parts(_payloads(a.share(3))) for a in (algos[0], twin))
    assert len(ones) == len(twos)
    for one, two in zip(ones, twos):
        assert one.meta == two.meta and one.tensors.keys() == two.tensors.keys()
        for k in one.tensors:
            np.testing.assert_array_equal(one.tensors[k], two.tensors[k])
    assert [evaluate(a.evaluated_model(), a.ctx.x_test, a.ctx.y_test) for a in (algos[0], twin)] == \
        [evaluate(twin.evaluated_model(), twin.ctx.x_test, twin.ctx.y_test)] * 2
    assert algos[0].stats() == twin.stats()


def _payloads(shared):
    return [] if shared is None else [shared] if isinstance(shared, Payload) else list(shared)


# -- FedCLAR: the clusters form in the order that runs -------------------------------------------
def test_fedclar_forms_clusters_on_planted_data_in_a_real_run(tmp_path):
    """Two planted groups of devices (disjoint classes): each device's cluster is its own group.
    Under the old order (clustering in fuse before train had computed the update) no device ever
    clustered and ``algorithm_stats`` stayed empty."""
    loaded = load_scenario(SCENARIO, [
        "dataset.synthetic.num_devices=8", "dataset.synthetic.samples_per_class=16",
        "dataset.synthetic.classes_per_device=2", "model.hidden=[16,32]", "rounds=8",
        "algorithm.name=fedclar", "algorithm.cluster_round=3", "algorithm.fine_tune_rounds=1",
        "algorithm.threshold=0.9"])
    summary = run_scenario(loaded, tmp_path, progress=False)
    stats = summary["algorithm_stats"]
    assert stats["clustered"] == 1.0, stats
    assert 1 < stats["cluster_members"] < stats["cluster_candidates"], stats


# -- the intake -----------------------------------------------------------------------------------
def _intake(**rules):
    loaded = _loaded("gossip-avg")
    dataset = loaded.federation
    algo = build_algorithm(loaded, dataset, 0)
    sender = build_algorithm(loaded, dataset, 1)
    train_once(sender, 0)
    recorder = Recorder(6)
    intake = Intake(0, algo, recorder, IntakeRules(2**24, num_devices=6, **rules))
    return intake, recorder, sender.share(0), sender.kind()


def test_intake_checks_sender_window_kind_relay_and_counts_each_drop():
    intake, rec, payload, kind = _intake(rounds=4, max_age_s=100.0, hop_limit=3)
    ok = encode_share(kind, 1, 0, 0.0, payload, 2**24)
    assert intake.take(ok, link=1, now=1.0, round=0) is not None
    cases = {
        "identity": (encode_share(kind, 2, 0, 0.0, payload, 2**24), 1, 1.0),       # claims 2 over 1's link
        "window": (encode_share(kind, 1, 4, 0.0, payload, 2**24), 1, 1.0),         # round past the run
        "codec:bad-magic": (b"garbage" * 10, 1, 1.0),
        "artifact": (encode_share("other/kind", 1, 0, 0.0, payload, 2**24), 1, 1.0),
    }
    for reason, (data, link, now) in cases.items():
        assert intake.take(data, link=link, now=now, round=0) is None
        assert rec.drop_reasons[reason] >= 1, reason
    stale = encode_share(kind, 1, 1, 0.0, payload, 2**24)
    assert intake.take(stale, link=1, now=500.0, round=0) is None and rec.drop_reasons["window"] == 2
    relayed = encode_share(kind, 2, 1, 0.0, payload, 2**24, relay={"origin": 0, "hops": 2})
    assert intake.take(relayed, link=2, now=1.0, round=0) is None   # origin is the receiver itself
    relayed = encode_share(kind, 2, 1, 0.0, payload, 2**24, relay={"origin": 3, "hops": 2})
    item = intake.take(relayed, link=2, now=1.0, round=0)
    assert item is not None and item.sender == 3 and item.hops == 2
    assert rec.devices[0].messages_dropped == sum(rec.drop_reasons.values()) == 6
    assert rec.devices[0].messages_received == 2


def test_intake_ignores_a_peer_after_too_many_bad_messages():
    intake, rec, payload, kind = _intake(max_bad_messages=2)
    ignored = []
    intake.on_ignore = ignored.append
    for _ in range(3):
        intake.take(b"garbage" * 10, link=1, now=0.0, round=0)
    assert ignored == [1] and intake.ignored == {1}
    assert intake.take(encode_share(kind, 1, 0, 0.0, payload, 2**24), link=1, now=0.0, round=0) is None
    assert rec.drop_reasons["ignored"] == 1


def test_a_peer_holds_a_faster_neighbours_later_round_until_it_gets_there(tmp_path):
    """Real peers fuse in round r what was shared up to r-1, however skewed their clocks: a
    message from a later round waits (also across a checkpoint) instead of entering the cache."""
    intake, rec, payload, kind = _intake(hold_later_rounds=True)
    ahead = encode_share(kind, 1, 3, 0.0, payload, 2**24)
    held = intake.take(ahead, link=1, now=0.0, round=1)
    assert held == Held(sender=1, round=3) and not intake.algorithm.cache
    assert intake.release(2, now=0.0) == [] and not intake.algorithm.cache
    save_checkpoint(tmp_path / "c.pt", "peer", "f", {"intake": intake.state_dict()})
    restored, rec2, _, _ = _intake(hold_later_rounds=True)
    restored.load_state_dict(load_checkpoint(tmp_path / "c.pt", "peer", "f")["intake"])
    (item,) = restored.release(3, now=0.0)
    assert item.sender == 1 and item.round == 3 and restored.algorithm.cache[1] is item
    assert restored.held == [] and rec2.devices[0].messages_received == 1
    assert sum(rec.drop_reasons.values()) == sum(rec2.drop_reasons.values()) == 0
    # A restarted neighbour sending round 3 again: refused, never fused twice, and counted apart
    # from the drops (nothing is missing).
    assert restored.take(ahead, link=1, now=0.0, round=4) is None
    assert restored.algorithm.cache[1] is item
    assert rec2.devices[0].messages_repeated == 1 and rec2.messages_dropped == 0 and not rec2.drop_reasons


def test_a_restarted_peers_resend_request_is_answered_once_with_the_frames_it_lost(tmp_path):
    """What reached a peer after its last checkpoint died with it: on restart it asks each
    neighbour to send again what it shared from the resume round on. Only real peers answer
    (the simulator's intake drops the kind); one answer per neighbour per round."""
    from p2pfed.device import ResendRequest, encode_resend_request
    from p2pfed.peer.recovery import SentFrames

    request = encode_resend_request(1, 3, 0.0, 2**24)
    peer_intake, rec, _, _ = _intake(hold_later_rounds=True)
    assert peer_intake.take(request, link=1, now=0.0, round=4) == ResendRequest(sender=1, from_round=3)
    assert not peer_intake.algorithm.cache and rec.devices[0].messages_received == 0
    sim_intake, sim_rec, _, _ = _intake()
    assert sim_intake.take(request, link=1, now=0.0, round=4) is None
    assert sim_rec.drop_reasons == {"artifact": 1}
    assert peer_intake.take(encode_resend_request(2, 3, 0.0, 2**24), link=1, now=0.0, round=4) is None
    assert rec.drop_reasons == {"identity": 1}   # the request, too, must come from its sender

    sent = SentFrames()
    for r, to, data in [(1, None, b"r1"), (2, None, b"r2"), (3, None, b"r3"), (3, 2, b"r3-to-2"), (4, 1, b"r4-to-1")]:
        sent.keep(r, to, data)
    assert [f[0] for f in sent.frames] == [3, 3, 4]          # only the last two rounds are kept
    save_checkpoint(tmp_path / "c.pt", "peer", "f", {"sent": sent.state_dict()})
    restored = SentFrames()
    restored.load_state_dict(load_checkpoint(tmp_path / "c.pt", "peer", "f")["sent"])
    assert restored.for_request(1, 3, current_round=4) == [b"r3", b"r4-to-1"]
    assert restored.for_request(1, 3, current_round=4) is None    # asked again in the same round
    assert restored.for_request(2, 4, current_round=4) == []      # nothing of round 4 for peer 2
    assert restored.for_request(1, 4, current_round=5) == [b"r4-to-1"]


# -- validate catches what run and launch would refuse ----------------------------------------------
def test_validate_reports_cross_section_and_method_rules_naming_file_and_field(tmp_path, capsys):
    from p2pfed.cli.main import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("rounds: 6\ndynamic: {devices_fraction: 0.5}\ncontacts: {kind: poisson, duration_s: 600}\n"
                   "model: {hidden: [8]}\nalgorithm: {name: fedper, head_layers: 2}\n")
    assert main(["validate", str(bad)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"{bad}: dynamic.devices_fraction: dynamic data") for line in out), out
    bad.write_text("rounds: 6\nmodel: {hidden: [8]}\nalgorithm: {name: fedper, head_layers: 2}\n")
    assert main(["validate", str(bad)]) == 2
    assert f"{bad}: algorithm.head_layers: 2 leaves no shared body in a 2-layer model" in capsys.readouterr().out
    bad.write_text("rounds: 6\nalgorithm: {name: fedclar, cluster_round: 4, fine_tune_rounds: 1}\n")
    assert main(["validate", str(bad)]) == 2
    assert f"{bad}: algorithm.cluster_round: 4 leaves no round to cluster in" in capsys.readouterr().out
    ok = tmp_path / "ok.yaml"
    ok.write_text("rounds: 6\nengine: {participation: 0.5}\n"
                  "contacts: {kind: poisson, duration_s: 600, loss_rate: 0.1}\n")
    assert main(["validate", str(ok)]) == 0
    assert main(["validate", "--launch", str(ok)]) == 2
    out = capsys.readouterr().out
    assert f"{ok}: engine.participation: real peers always take part" in out
    assert f"{ok}: contacts.loss_rate: real peers over contacts run without it" in out   # contacts themselves run


def test_run_checkpoints_and_resumes_from_the_command_line(tmp_path, capsys):
    from p2pfed.cli.main import main

    sets = sum((["--set", s] for s in SMALL + ["algorithm.name=fedsub"]), [])
    assert main(["run", str(SCENARIO), *sets, "--out", str(tmp_path / "a"), "--quiet"]) == 0
    assert main(["run", str(SCENARIO), *sets, "--out", str(tmp_path / "b"), "--quiet",
                 "--checkpoint-every", "2"]) == 0
    assert (tmp_path / "b" / "checkpoint.pt").exists()
    assert (tmp_path / "a" / "rounds.csv").read_text() == (tmp_path / "b" / "rounds.csv").read_text()
    assert main(["run", str(SCENARIO), *sets, "--out", str(tmp_path / "b"), "--quiet",
                 "--checkpoint-every", "2"]) == 2
    assert "--resume continues it" in capsys.readouterr().err
