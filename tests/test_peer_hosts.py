"""Real hosts, hardened: every file a user carries between hosts is named when it is wrong,
every refusal exits 2, a bundle is not re-planned over by accident, and a run knows its own
results (all in-process: planning and merging start no peer)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from p2pfed.cli.main import main
from p2pfed.device import Control
from p2pfed.peer.clock import ClockProbe, Reading
from p2pfed.peer.config import load_peer_config
from p2pfed.peer.faults import ClockOffset, Faults, skew_clocks
from p2pfed.peer.keys import make_keys
from p2pfed.peer.launcher import free_ports
from p2pfed.peer.runtime import Peer
from p2pfed.scenario.errors import ScenarioError
from p2pfed.transport import decode
from tests.peer_support import ROOT, SCENARIO, TINY, write_peer_files


def _plan(tmp_path: Path, capsys, *extra: str, hosts: str = "hosts.yaml") -> tuple[int, str]:
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": [f"127.0.0.1:{7100 + i}" for i in range(3)]}))
    code = main(["plan", str(SCENARIO), "--hosts", str(tmp_path / hosts), "--out", str(tmp_path / "bundle"),
                 *sum((["--set", s] for s in TINY), []), *extra])
    return code, capsys.readouterr().err


def test_a_missing_hosts_file_is_one_line(tmp_path, capsys):
    code, err = _plan(tmp_path, capsys, hosts="nope.yaml")
    assert code == 2
    assert err.strip().splitlines() == [f"{tmp_path / 'nope.yaml'}: cannot read hosts file: No such file or directory"]


def test_merge_names_a_missing_or_damaged_plan_or_peer_file(tmp_path, capsys):
    assert _plan(tmp_path, capsys)[0] == 0
    bundle, out = tmp_path / "bundle", str(tmp_path / "merged")
    plan = bundle / "plan.json"
    text = plan.read_text()
    plan.unlink()
    assert main(["merge", str(bundle), "--out", out]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"{plan}: plan file not found"]
    plan.write_text(text[:40])   # cut short, as an interrupted copy leaves it
    assert main(["merge", str(bundle), "--out", out]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{plan}:") and "not valid JSON" in line
    plan.write_text(text)
    results = bundle / "peer-1" / "results"
    results.mkdir()
    (results / "peer.json").write_text('{"id": 1, "recorder": {')
    assert main(["merge", str(bundle), "--out", out]) == 2
    err = capsys.readouterr().err
    assert f"{results / 'peer.json'}:1:" in err and "not valid JSON" in err


def test_plan_refuses_to_replace_a_bundles_keys_without_force(tmp_path, capsys):
    assert _plan(tmp_path, capsys)[0] == 0
    secret = tmp_path / "bundle" / "peer-0" / "keys" / "peer-0.key_secret"
    before = secret.read_text()
    code, err = _plan(tmp_path, capsys)
    assert code == 2
    [line] = err.strip().splitlines()
    assert line.startswith(f"{tmp_path / 'bundle'}: already holds a bundle") and "--force" in line
    assert secret.read_text() == before
    (tmp_path / "bundle" / "peer-2" / "results").mkdir()   # an earlier run's results go with it
    assert _plan(tmp_path, capsys, "--force")[0] == 0
    assert secret.read_text() != before
    assert not (tmp_path / "bundle" / "peer-2" / "results").exists()


def test_ctrl_c_stops_a_waiting_peer_in_one_line_its_checkpoint_intact(tmp_path):
    """Peer 0 alone (its neighbour never starts) finishes round 0 and waits out a long period."""
    [config, _] = write_peer_files(tmp_path, n=2, start_timeout_s=0.5, round_period_s=60.0)
    # started with SIGINT ignored, as a shell starts a background job: Ctrl-C must still stop it
    proc = subprocess.Popen([sys.executable, "-m", "p2pfed.cli.main", "peer", "--config", str(config)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    checkpoint = tmp_path / "peer-0" / "checkpoint.pt"
    deadline = time.monotonic() + 60
    while not checkpoint.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 130, lines
    assert "Traceback" not in err.decode()
    assert lines[-1] == (f"p2pfed peer: peer 0 interrupted (Ctrl-C); its checkpoint {checkpoint} is intact: "
                         "start it again to resume from it")
    assert torch.load(checkpoint, weights_only=True)["state"]["next_round"] == 1   # whole, round 0 in it



def test_every_folder_of_a_plan_carries_its_run_id_and_scenario_hash(tmp_path, capsys):
    assert _plan(tmp_path, capsys)[0] == 0
    plan = json.loads((tmp_path / "bundle" / "plan.json").read_text())
    assert len(plan["run_id"]) == 12 and len(plan["scenario_hash"]) == 16
    for i in range(3):
        peer = yaml.safe_load((tmp_path / "bundle" / f"peer-{i}" / "peer.yaml").read_text())
        assert peer["run_id"] == plan["run_id"] and peer["public_key"] == f"keys/peer-{i}.key"
    assert _plan(tmp_path, capsys, "--force")[0] == 0
    again = json.loads((tmp_path / "bundle" / "plan.json").read_text())
    assert again["run_id"] != plan["run_id"] and again["scenario_hash"] == plan["scenario_hash"]


def test_merge_refuses_results_of_another_run_or_peer_naming_them(tmp_path, capsys):
    assert _plan(tmp_path, capsys)[0] == 0
    bundle = tmp_path / "bundle"
    plan = json.loads((bundle / "plan.json").read_text())
    files = []
    for i, (peer_id, run_id) in enumerate([(0, plan["run_id"]), (1, "0123456789ab"), (0, plan["run_id"])]):
        (bundle / f"peer-{i}" / "results").mkdir()
        files.append(bundle / f"peer-{i}" / "results" / "peer.json")
        files[-1].write_text(json.dumps({"id": peer_id, "run_id": run_id, "scenario_hash": plan["scenario_hash"]}))
    assert main(["merge", str(bundle), "--out", str(tmp_path / "merged")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{files[1]}: the results of run 0123456789ab, not of this plan's run {plan['run_id']} (another run's "
        "results/ folder, or one from before the bundle was planned again)",
        f"{files[2]}: the results of peer 0, copied into peer 2's folder"]
    assert not (tmp_path / "merged" / "summary.json").exists()


def test_a_peer_given_another_peers_secret_key_refuses_to_start_naming_it(tmp_path, capsys):
    assert _plan(tmp_path, capsys)[0] == 0
    keys = tmp_path / "bundle" / "peer-0" / "keys"
    neighbours_secret = tmp_path / "bundle" / "peer-1" / "keys" / "peer-1.key_secret"
    (keys / "peer-0.key_secret").write_bytes(neighbours_secret.read_bytes())
    config = tmp_path / "bundle" / "peer-0" / "peer.yaml"
    assert main(["peer", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{config}: secret_key: keys/peer-0.key_secret is neighbour 1's key pair, not peer 0's: give this peer "
        "its own keys (each folder of a plan holds the right one)"]
    # A peer that is no neighbour's: told by this peer's own public key
    make_keys(tmp_path / "other", ["stranger"])
    (keys / "peer-0.key_secret").write_bytes((tmp_path / "other" / "stranger.key_secret").read_bytes())
    assert main(["peer", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{config}: secret_key: keys/peer-0.key_secret does not pair with this peer's public_key keys/peer-0.key: "
        "another peer's secret key?"]


def run_in_threads(configs: list[Path]) -> list[dict]:
    """Run these peers to the end in this process (no interpreter start per peer)."""
    results: list[dict] = [{} for _ in configs]

    def one(i: int) -> None:
        peer = Peer(load_peer_config(configs[i]))
        try:
            results[i] = peer.run()
        finally:
            peer.close()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(configs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(results), "a peer did not finish"
    return results


def test_a_host_that_never_starts_merges_partially_only_when_asked(tmp_path, capsys):
    ports = free_ports(3)
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": [f"127.0.0.1:{p}" for p in ports]}))
    assert main(["plan", str(SCENARIO), "--hosts", str(tmp_path / "hosts.yaml"), "--out", str(tmp_path / "bundle"),
                 "--start-timeout", "1", *sum((["--set", s] for s in TINY), [])]) == 0
    bundle = tmp_path / "bundle"
    run_in_threads([bundle / f"peer-{i}" / "peer.yaml" for i in (0, 1)])   # peer 2's host never starts
    own = json.loads((bundle / "peer-0" / "results" / "summary.json").read_text())
    assert own["runtime"]["never_heard"] == [2]                             # said in its own results
    assert abs(own["runtime"]["clock_offsets"]["1"]["offset_s"]) < 0.5      # one machine, one clock
    capsys.readouterr()
    merged = tmp_path / "merged"
    assert main(["merge", str(bundle), "--out", str(merged)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{bundle}: no results from peers [2] ({bundle / 'peer-2' / 'results' / 'peer.json'} not found): copy each "
        "host's results/ folder back into its peer folder, or merge the others with --partial"]
    assert main(["merge", str(bundle), "--out", str(merged), "--partial"]) == 0
    assert "PARTIAL: no results from peers [2]; merged the other 2" in capsys.readouterr().err
    summary = json.loads((merged / "summary.json").read_text())
    assert summary["partial"] == {"missing_peers": [2], "merged_peers": [0, 1]}
    assert summary["devices"] == 2 and summary["runtime"]["never_heard"] == {"0": [2], "1": [2]}
    assert sorted(summary["runtime"]["clock_offsets"]) == ["0", "1"]
    assert summary["comm"]["messages_sent"] == 2 * 2 * 3   # counted per neighbour, arrived or not, as simulated


def _control(frame: bytes) -> Control:
    msg = decode(frame, max_bytes=2**20)
    return Control(msg.sender, msg.kind, dict(msg.meta))


def test_a_neighbours_clock_offset_is_read_from_a_ping_and_judged_against_the_round_period():
    """Peer 1's clock runs 2 s ahead of peer 0's; the ping takes 0.05 s each way."""
    a, b = ClockProbe(0, 2**20), ClockProbe(1, 2**20)
    ping = a.ping(100.0)
    reply, ping_back = b.take(_control(ping), now=102.05)   # b has no reading of a yet: it pings back
    assert a.take(_control(reply), now=100.1) == []
    assert a.best[1] == Reading(offset_s=2.0, round_trip_s=pytest.approx(0.1))
    assert a.report() == {"1": {"offset_s": 2.0, "round_trip_s": 0.1}}
    assert len(a.take(_control(ping_back), now=100.12)) == 1  # answered; a's reading is good: no ping back
    with pytest.raises(ScenarioError) as refused:
        a.grid_warnings([1, 2], 1.5, "peer.yaml")
    assert refused.value.problems == [
        "peer.yaml: shared grid: neighbour 1's clock is 2.000 s ahead of this peer's (± 0.050 s), 133% of the "
        "1.5 s round period, over 50%: its artifacts would miss their rounds; synchronise the hosts' clocks "
        "(e.g. NTP) or plan a longer --round-period"]
    assert a.grid_warnings([1, 2], 10.0, "peer.yaml") == [
        "peer.yaml: shared grid: neighbour 1's clock is 2.000 s ahead of this peer's (± 0.050 s), 20% of the "
        "10 s round period, over 10%: artifacts may be late",
        "peer.yaml: no clock reading from neighbour 2 before the shared start (it had not started): its clock "
        "is not checked"]
    assert a.grid_warnings([1], 30.0, "peer.yaml") == []


def test_a_shared_start_already_past_is_refused_saying_by_how_much(tmp_path, capsys):
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"hosts": ["10.0.0.1", "10.0.0.2", "10.0.0.3"]}))
    code = main(["plan", str(SCENARIO), "--hosts", str(tmp_path / "hosts.yaml"), "--out", str(tmp_path / "b"),
                 "--round-period", "1", "--shared-grid", "--start-at", str(time.time() - 30)])
    assert code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("--start-at ") and ": passed 30 s ago; give an instant after" in line
    [config, _] = write_peer_files(tmp_path, n=2, round_period_s=1.0, shared_grid=True, start_time=time.time() - 30)
    peer = Peer(load_peer_config(config))
    try:
        with pytest.raises(ScenarioError) as refused:
            peer.run()
    finally:
        peer.close()
    [problem] = refused.value.problems
    assert problem.startswith(f"{config}: start_time: the shared start ") and " had passed 3" in problem
    assert "plan again with a later --start-at, e.g. --start-at $(( $(date +%s) + 120 ))" in problem
    assert not (tmp_path / "peer-0" / "checkpoint.pt").exists()   # not one round ran


def _skewed_grid_bundle(tmp_path: Path, name: str, offset_s: float, start_at: float) -> Path:
    """Three peers on loopback on a shared 1 s grid; peer 2's clock ``offset_s`` ahead (a faults file's
    ``clocks``, as the emulated LAN applies it)."""
    hosts = tmp_path / f"{name}.yaml"
    hosts.write_text(yaml.safe_dump({"hosts": [f"127.0.0.1:{p}" for p in free_ports(3)]}))
    assert main(["plan", str(SCENARIO), "--hosts", str(hosts), "--out", str(tmp_path / name), "--round-period", "1",
                 "--shared-grid", "--start-at", str(start_at),
                 *sum((["--set", s] for s in [*TINY, "rounds=2"]), [])]) == 0
    skew_clocks(Faults(clocks=[ClockOffset(peer=2, offset_s=offset_s)]), tmp_path / name)
    return tmp_path / name


def _off_by(line: str, neighbour: int, expected: float) -> bool:
    """Whether the offset a clock warning or refusal gives for ``neighbour`` is ``expected`` (ahead:
    positive) within the uncertainty it states (half the round trip) and a little processing."""
    found = re.search(rf"neighbour {neighbour}'s clock is ([0-9.]+) s (ahead of|behind) this peer's \(± ([0-9.]+) s\)",
                      line)
    assert found, line
    offset = float(found.group(1)) * (1 if found.group(2) == "ahead of" else -1)
    return abs(offset - expected) <= float(found.group(3)) + 0.02


@pytest.mark.slow   # six real peers waiting for a shared start: in the slow set .ci/run also runs
def test_a_skewed_clock_on_a_shared_grid_is_warned_of_then_refused(tmp_path, capsys, caplog):
    """Peer 2's clock 0.3 s ahead (30 % of the period): warned of; 0.8 s ahead: refused on both sides."""
    start_at = time.time() + 12   # time for six peers to load on a busy machine
    warned = _skewed_grid_bundle(tmp_path, "warned", 0.3, start_at)
    refused = _skewed_grid_bundle(tmp_path, "refused", 0.8, start_at)
    capsys.readouterr()
    outcomes: dict[str, object] = {}

    def one(config: Path) -> None:
        peer = Peer(load_peer_config(config))
        try:
            outcomes[str(config)] = peer.run()
        except ScenarioError as exc:
            outcomes[str(config)] = exc
        finally:
            peer.close()
    others = [warned / f"peer-{i}" / "peer.yaml" for i in range(3)]
    others += [refused / f"peer-{i}" / "peer.yaml" for i in (0, 1)]
    threads = [threading.Thread(target=one, args=(c,)) for c in others]
    for t in threads:
        t.start()
    with caplog.at_level("WARNING", logger="p2pfed.peer"):
        code = main(["peer", "--config", str(refused / "peer-2" / "peer.yaml")])   # the skewed one, as a user runs it
        for t in threads:
            t.join(120)
    # refused: the skewed peer exits 2 naming both neighbours, each a clock 0.8 s behind its own
    assert code == 2
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if "shared grid" in line]
    assert len(lines) == 2 and all("over 50%: its artifacts would miss their rounds" in line for line in lines)
    assert _off_by(lines[0], 0, -0.8) and _off_by(lines[1], 1, -0.8)
    for i in (0, 1):   # and its neighbours refuse too, naming it, before their first round
        problem = str(outcomes[str(refused / f"peer-{i}" / "peer.yaml")])
        assert "over 50%" in problem and _off_by(problem, 2, 0.8)
        assert not (refused / f"peer-{i}" / "results" / "checkpoint.pt").exists()
    # warned: the run goes on; peer 0 said peer 2's clock is 30 % of the period off, and reports it
    warnings = [r.getMessage() for r in caplog.records if str(warned / "peer-0") in r.getMessage()]
    [warning] = [w for w in warnings if "shared grid" in w]
    assert "over 10%: artifacts may be late" in warning and _off_by(warning, 2, 0.3)
    summary = outcomes[str(warned / "peer-0" / "peer.yaml")]
    assert isinstance(summary, dict) and summary["rounds"] == 2
    offsets = json.loads((warned / "peer-0" / "results" / "summary.json").read_text())["runtime"]["clock_offsets"]
    for n, expected in (("1", 0.0), ("2", 0.3)):
        assert abs(offsets[n]["offset_s"] - expected) <= offsets[n]["round_trip_s"] / 2 + 0.02
