"""Real peers over contacts (``p2pfed launch`` with a scenario's ``contacts``): the contact
runtime's protocol on real sockets — on loopback, and on the emulated LAN whose links are up only
during contacts.

What must hold whatever the machine's load: every transfer a peer starts ends completed or
aborted; a completed transfer was taken in by the receiver's intake exactly once, an aborted one at
most once (its acknowledgement lost as the contact ended); each device steps as often as in the
simulator (same first phase, no jitter); and the emulated LAN leaves nothing behind. How close the
counters come to the simulator's is measured in ``bench/contact_validation.py`` (a benchmark, not a
test: it depends on the machine's speed).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from p2pfed.cli.main import main
from p2pfed.device import Control, Intake, IntakeRules
from p2pfed.device.wire import ACK_KIND, CONTROL_KINDS, HAVE_KIND, encode_control
from p2pfed.engine.runner import run_scenario
from p2pfed.network.lan import namespaces_alive
from p2pfed.network.linkemu import LinkModel, LinkScheduler
from p2pfed.peer.config import PeerTiming, load_peer_config
from p2pfed.peer.contacts import ContactPeer
from p2pfed.peer.emulated import launch_emulated, link_models
from p2pfed.peer.launcher import launch
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import peer_neighbours
from p2pfed.scenario.contacts import partners
from p2pfed.scenario.loader import launch_problems, load_scenario
from tests.peer_support import write_peer_files

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
# Contacts short and links slow enough that some transfers are cut (the simulator aborts some).
CONTACTS = ["dataset.synthetic.samples_per_class=12", "model.hidden=[8,16]", "contacts.kind=poisson",
            "contacts.mean_intercontact_s=60", "contacts.mean_duration_s=20", "contacts.bandwidth_bps=4e3",
            "contacts.latency_s=0.01", "contacts.duration_s=300", "asynchronous.train_period_s=60",
            "evaluation.every_s=100"]


def _loaded(devices: int, *extra: str):
    return load_scenario(SCENARIO, [f"dataset.synthetic.num_devices={devices}", *CONTACTS, *extra])


# the pieces --------------------------------------------------------------------------------
def test_a_contact_link_carries_packets_only_within_its_windows():
    link = LinkModel(0.01, 1e6, up=((1.0, 2.0), (5.0, 5.5)))
    sched = LinkScheduler({("a", "b"): link}, origin=100.0)
    at = {t: sched.admit("a", "b", 100, now=100.0 + t) for t in (0.5, 1.0, 1.9, 2.0, 4.0, 5.2, 6.0)}
    assert [t for t, r in at.items() if r is not None] == [1.0, 1.9, 5.2]
    assert sched.stats()["down"] == 4


def test_link_models_follow_the_contact_plan_in_wall_clock_time():
    loaded = _loaded(4)
    plan, duration = loaded.contacts
    links = link_models(loaded, speedup=10)
    first = plan.contacts[0]
    model = links[first.a, first.b]
    assert links[first.b, first.a] == model
    assert model.bandwidth_bps == pytest.approx(4e4) and model.latency_s == pytest.approx(1e-3)
    assert model.is_up(first.start / 10 + 1e-6) and not model.is_up(min(first.end, duration) / 10 + 1e-6)
    met = {tuple(sorted(pair)) for pair in links}
    assert met == {(c.a, c.b) for c in plan.contacts if c.start < duration}
    assert peer_neighbours(loaded)[0] == partners(plan, duration)


def test_an_intake_returns_contact_messages_to_the_runtime():
    class Algo:   # the intake reaches no method for a control message
        def kind(self) -> str:
            return "fedsub"

    rules = IntakeRules(10_000, control_kinds=CONTROL_KINDS)
    intake = Intake(0, Algo(), Recorder([0, 1]), rules)   # type: ignore[arg-type]
    have = encode_control(HAVE_KIND, 1, 3.0, {"have": [[2, "prototypes", 4, 1.5]]}, 10_000)
    assert intake.take(have, link=1, now=3.0, round=0) == Control(1, HAVE_KIND, {"have": [[2, "prototypes", 4, 1.5]]})
    plain = Intake(0, Algo(), Recorder([0, 1]), IntakeRules(10_000))   # type: ignore[arg-type]
    assert plain.take(encode_control(ACK_KIND, 1, 3.0, {"bytes": 5}, 10_000), link=1, now=3.0, round=0) is None


def test_what_real_peers_over_contacts_cannot_run_is_refused_by_name():
    loaded = _loaded(4, "contacts.loss_rate=0.1", "asynchronous.batch_window_s=30", "churn.mean_online_s=100",
                     "churn.mean_offline_s=10")
    problems = "\n".join(launch_problems(loaded, check_imports=False))
    for field in ("contacts.loss_rate", "asynchronous.batch_window_s", "churn.mean_online_s"):
        assert field in problems
    assert launch_problems(_loaded(4), check_imports=False) == []


# real peers --------------------------------------------------------------------------------
def _check_protocol(summary: dict, out: Path, simulated: dict) -> None:
    comm = summary["comm"]
    assert comm["transfers_started"] == comm["transfers_completed"] + comm["transfers_aborted"]
    taken_in = sum(json.loads(p.read_text())["recorder"]["counters"][0]["messages_received"]
                   for p in out.rglob("peer.json"))
    # every completed transfer reached an intake exactly once; an aborted one did only where the
    # receiver took it in just before the end and its acknowledgement could not cross the closing
    # link (or, on a loaded machine, came after the sender's grace): at most once, never twice
    completed = comm["transfers_completed"] - comm["messages_dropped"]
    assert completed <= taken_in <= completed + comm["transfers_aborted"]
    assert summary["rounds"] == simulated["rounds"]            # each device stepped as in the simulator
    assert summary["asynchronous"]["trainings_per_device"] == simulated["asynchronous"]["trainings_per_device"]
    rounds = (out / "rounds.csv").read_text().splitlines()
    assert len(rounds) - 1 == 3                                 # evaluations at 100, 200, 300 s
    assert summary["runtime"]["contact_protocol"]["control_messages"] > 0


@pytest.mark.slow   # real peers in contacts for seconds of wall time: in the slow set .ci/run also runs
def test_peers_over_contacts_read_the_clocks_of_the_peers_they_meet(tmp_path):
    """Three peers in contacts that never end (``static``), 40 simulated seconds at 20x on
    loopback; peer 2's clock 0.5 s ahead of the others'."""
    configs = write_peer_files(tmp_path, n=3, start_time=time.time() + 6, speedup=20, overrides=[
        "contacts.kind=static", "contacts.duration_s=40", "asynchronous.train_period_s=20", "evaluation.every_s=20"])
    configs[2].write_text(configs[2].read_text() + "clock_offset_s: 0.5\n")
    done: list[int] = []

    def one(config: Path) -> None:
        peer = ContactPeer(load_peer_config(config))
        try:
            peer.run()
            done.append(peer.config.id)
        finally:
            peer.close()
    threads = [threading.Thread(target=one, args=(c,)) for c in configs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(done) == [0, 1, 2]
    skew = {0: 0.0, 1: 0.0, 2: 0.5}
    for i in range(3):
        summary = json.loads((tmp_path / f"peer-{i}" / "summary.json").read_text())
        offsets = summary["runtime"]["clock_offsets"]
        assert sorted(offsets) == [str(j) for j in range(3) if j != i]
        for j, reading in offsets.items():   # each neighbour's clock minus this one's, within half the round trip
            assert abs(reading["offset_s"] - (skew[int(j)] - skew[i])) <= reading["round_trip_s"] / 2 + 0.02, (i, j)
        assert summary["runtime"]["contact_protocol"]["control_messages"] > 0


@pytest.mark.slow   # in the slow set .ci/run also runs (the default suite's 10 minutes)
def test_real_peers_keep_to_the_contact_plan_on_loopback(tmp_path):
    loaded = _loaded(4)
    simulated = run_scenario(loaded, None, progress=False)
    summary = launch(loaded, SCENARIO, ["dataset.synthetic.num_devices=4", *CONTACTS], None, tmp_path / "run",
                     None, insecure=False, timeout_s=300, timing=PeerTiming(speedup=20))
    _check_protocol(summary, tmp_path / "run", simulated)
    assert summary["runtime"]["secure"]


@pytest.mark.slow   # in the slow set .ci/run also runs (the default suite's 10 minutes)
def test_real_peers_over_contacts_on_the_emulated_lan(tmp_path, permitted):
    """Six CURVE peers, each its own host, links up only during the plan's contacts: transfers cut
    by a contact's end are aborted (the simulator cuts some), and no namespace is left."""
    loaded = _loaded(6)
    simulated = run_scenario(loaded, None, progress=False)
    assert simulated["comm"]["transfers_aborted"] > 0
    summary = launch_emulated(loaded, tmp_path / "run", insecure=False, timeout_s=300, timing=PeerTiming(speedup=20))
    _check_protocol(summary, tmp_path / "run", simulated)
    assert summary["comm"]["transfers_aborted"] > 0 and summary["comm"]["bytes_wasted"] > 0
    assert summary["runtime"]["network"]["unlinked"] == 0   # no packet between two devices that never meet
    held = json.loads((tmp_path / "run" / "network" / "lan.json").read_text())
    assert namespaces_alive(held["namespaces"]) == []


def test_a_plan_over_contacts_needs_one_start_time_and_lists_whom_each_peer_meets(tmp_path, capsys):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(yaml.safe_dump({"hosts": [f"192.168.7.{i + 1}" for i in range(4)]}))
    sets = [a for s in ["dataset.synthetic.num_devices=4", *CONTACTS] for a in ("--set", s)]
    args = ["plan", str(SCENARIO), *sets, "--hosts", str(hosts), "--out", str(tmp_path / "bundle"), "--insecure"]
    assert main(args) == 2
    assert "--start-at" in capsys.readouterr().err
    assert main([*args, "--start-at", "1900000000", "--speedup", "5"]) == 0
    plan, duration = _loaded(4).contacts
    for i, met in enumerate(partners(plan, duration)):
        peer = yaml.safe_load((tmp_path / "bundle" / f"peer-{i}" / "peer.yaml").read_text())
        assert [n["id"] for n in peer["neighbours"]] == met
        assert peer["start_time"] == 1900000000 and peer["speedup"] == 5


@pytest.mark.slow   # in the slow set .ci/run also runs
def test_real_peers_refuse_a_sybils_forged_copies_over_contacts(tmp_path):
    """Peer 0 sends its share also as copies "carried" for two other peers: every real peer
    refuses them (no signature of the claimed owner's key), and counts them."""
    sets = ["dataset.synthetic.num_devices=4", *CONTACTS, "forwarding.enabled=true", "forwarding.parts=[whole]",
            "adversaries=[{kind: [sign-flip, sybil], devices: [0], factor: 3, identities: 2}]"]
    summary = launch(load_scenario(SCENARIO, sets), SCENARIO, sets, None, tmp_path / "run", None, insecure=False,
                     timeout_s=300, timing=PeerTiming(speedup=20))
    assert summary["comm"]["drop_reasons"].get("bad-signature", 0) > 0, summary["comm"]["drop_reasons"]


# Six devices meeting often, device 0 a Sybil: its model times -3 also sent as copies "carried" for
# all five others; the honest devices fuse by the median (the simulator: the median holds while
# signed, the honest models collapse while unsigned).
SYBIL = ["dataset.synthetic.num_devices=6", *CONTACTS, "contacts.mean_intercontact_s=20", "contacts.bandwidth_bps=4e4",
         "contacts.duration_s=450", "asynchronous.train_period_s=10", "training.epochs=3", "algorithm.name=gossip-avg",
         "algorithm.robust=median", "forwarding.enabled=true", "forwarding.parts=[whole]",
         "adversaries=[{kind: [sign-flip, sybil], devices: [0], factor: 3, identities: 5}]"]


def _sybil_on_the_lan(out: Path, *extra: str) -> tuple[dict, list[dict]]:
    """The merged summary and the honest peers' own summaries of a launch on the emulated LAN;
    whether it ends or fails, no namespace of its LAN is left."""
    try:
        summary = launch_emulated(load_scenario(SCENARIO, [*SYBIL, *extra]), out, insecure=False, timeout_s=300,
                                  timing=PeerTiming(speedup=20))
    finally:
        held = out / "network" / "lan.json"
        assert not held.exists() or namespaces_alive(json.loads(held.read_text())["namespaces"]) == []
    honest = [json.loads((out / "bundle" / f"peer-{i}" / "results" / "summary.json").read_text()) for i in range(1, 6)]
    return summary, honest


@pytest.mark.slow   # in the slow set .ci/run also runs (two launches of six peers, 450 simulated seconds at 20x each)
def test_a_sybil_on_the_emulated_lan_is_refused_signed_and_wins_unsigned(tmp_path, permitted):
    """Six CURVE peers, each its own host: signed (the default), the Sybil's forged copies are
    refused by the honest peers and counted in their own ``comm.drop_reasons`` as
    ``bad-signature``, and the median keeps them learning; unsigned, the same copies are taken as
    their claimed owners' and outvote the median: the honest models are driven to chance level
    (one class predicted for all) while the signed run's stay far above it."""
    signed, signed_honest = _sybil_on_the_lan(tmp_path / "signed")
    unsigned, unsigned_honest = _sybil_on_the_lan(tmp_path / "unsigned", "security.sign_artifacts=false")
    refused = [s["comm"]["drop_reasons"].get("bad-signature", 0) for s in signed_honest]
    assert sum(refused) == signed["comm"]["drop_reasons"]["bad-signature"] > 0, refused
    assert signed["adversaries"]["honest_f1_mean"] > 0.45
    assert all("bad-signature" not in s["comm"]["drop_reasons"] for s in unsigned_honest)
    assert unsigned["adversaries"]["honest_f1_mean"] < 0.2
