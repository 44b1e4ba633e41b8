"""Three hosts on an emulated LAN (network namespaces joined by emulated links, built and removed
here), run as a user runs real hosts: ``p2pfed plan``, each folder's ``start.sh`` on its host,
``p2pfed merge``. A host that never starts (a partial merge), a results folder of another run
(refused), a peer killed and restarted (counts that mean what they say), a host whose clock is off
on a shared grid (warned of, then refused), a bundle planned again (its keys kept). Skipped, with
the reason, where namespaces cannot be built."""

from __future__ import annotations

import json
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
import torch
import yaml

from p2pfed.cli.main import main
from p2pfed.engine.runner import run_scenario
from p2pfed.network.lan import EmulatedLan, host_address, namespaces_alive
from p2pfed.network.linkemu import LinkModel
from p2pfed.peer.faults import ClockOffset, Faults, skew_clocks
from p2pfed.peer.launcher import peer_environment
from p2pfed.scenario.loader import load_scenario
from tests.peer_support import SCENARIO, TINY

ROUNDS = 6
SETS = [*TINY, f"rounds={ROUNDS}", "algorithm.name=gossip-avg"]
LINK = LinkModel(latency_s=0.005, bandwidth_bps=1e8)


def _plan(tmp_path: Path, name: str, *extra: str, port: int = 5555, sets: list[str] = SETS, code: int = 0) -> Path:
    hosts = tmp_path / f"hosts-{port}.yaml"
    hosts.write_text(yaml.safe_dump({"hosts": [f"{host_address(i)}:{port}" for i in range(3)]}))
    assert main(["plan", str(SCENARIO), "--hosts", str(hosts), "--out", str(tmp_path / name),
                 *sum((["--set", s] for s in sets), []), *extra]) == code
    return tmp_path / name


def _skewed(tmp_path: Path, name: str, offset_s: float, port: int, start_at: float) -> Path:
    """Two rounds on a shared one-second grid; host 2's clock ``offset_s`` ahead (the faults file's
    ``clocks``, applied to the bundle as ``p2pfed launch --network emulated`` applies it)."""
    bundle = _plan(tmp_path, name, "--round-period", "1", "--shared-grid", "--start-at", str(start_at), port=port,
                   sets=[*TINY, "rounds=2", "algorithm.name=gossip-avg"])
    skew_clocks(Faults(clocks=[ClockOffset(peer=2, offset_s=offset_s)]), bundle)
    return bundle


def _said(bundle: Path, host: int, neighbour: int) -> tuple[str, float]:
    """What host's log says of ``neighbour``'s clock on the shared grid: the verdict, and the
    offset (ahead: positive)."""
    [line] = [line for line in (bundle / f"peer-{host}" / "peer.log").read_text().splitlines()
              if f"shared grid: neighbour {neighbour}'s clock" in line]
    found = re.search(r"clock is ([0-9.]+) s (ahead of|behind) this peer's .*(over \d+%: [a-z ]+)", line)
    assert found, line
    return found.group(3), float(found.group(1)) * (1 if found.group(2) == "ahead of" else -1)


def _keys(bundle: Path) -> dict[str, bytes]:
    return {str(f.relative_to(bundle)): f.read_bytes() for f in sorted(bundle.glob("peer-*/keys/*"))}


def _start(lan: EmulatedLan, bundle: Path, host: int):
    return lan.spawn(host, ["sh", "start.sh"], cwd=bundle / f"peer-{host}", env=peer_environment())


def _rounds_done(bundle: Path, host: int) -> int:
    try:
        return int(torch.load(bundle / f"peer-{host}" / "results" / "checkpoint.pt",
                              weights_only=True)["state"]["next_round"])
    except (FileNotFoundError, RuntimeError, EOFError):
        return -1


@pytest.mark.slow   # in the slow set .ci/run also runs: thirteen peer processes on three emulated hosts
def test_three_emulated_hosts_missing_host_foreign_folder_restart_skewed_clock_replan(tmp_path, capsys, permitted):
    links = {(a, b): LINK for a in range(3) for b in range(3) if a != b}
    missing = _plan(tmp_path, "missing", "--start-timeout", "3")
    restarted = _plan(tmp_path, "restarted", "--round-period", "0.5", "--round-timeout", "60")
    # on other ports, beside the two runs below: host 2's clock 0.3 s ahead on a 1 s grid (warned of), 0.8 s (refused)
    start_at = time.time() + 45   # after eight peer processes have loaded on a busy machine
    skewed = [_skewed(tmp_path, name, offset, port, start_at)
              for name, offset, port in (("warned", 0.3, 5601), ("refused", 0.8, 5602))]
    with EmulatedLan(3, links, tmp_path / "net") as lan:
        clocks = [[_start(lan, bundle, h) for h in range(3)] for bundle in skewed]
        # host 2 never starts: the others give it up after the start timeout and finish
        assert [p.wait(timeout=180) for p in [_start(lan, missing, h) for h in (0, 1)]] == [0, 0]
        # every host starts; host 1 is killed (SIGKILL) mid-run and started again
        procs = [_start(lan, restarted, h) for h in range(3)]
        deadline = time.monotonic() + 120
        while _rounds_done(restarted, 1) < 2:
            assert procs[1].poll() is None and time.monotonic() < deadline, "host 1 never reached round 2"
            time.sleep(0.05)
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait(timeout=10)
        procs[1] = _start(lan, restarted, 1)
        assert [p.wait(timeout=240) for p in procs] == [0, 0, 0]
        assert [[p.wait(timeout=120) for p in run] for run in clocks] == [[0, 0, 0], [2, 2, 2]]
    assert namespaces_alive(json.loads((tmp_path / "net" / "lan.json").read_text())["namespaces"]) == []
    capsys.readouterr()

    # the missing host: refused, then merged partially, saying so
    assert main(["merge", str(missing), "--out", str(tmp_path / "m")]) == 2
    assert "merge the others with --partial" in capsys.readouterr().err
    assert main(["merge", str(missing), "--out", str(tmp_path / "m"), "--partial"]) == 0
    partial = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert partial["partial"] == {"missing_peers": [2], "merged_peers": [0, 1]}
    assert partial["runtime"]["never_heard"] == {"0": [2], "1": [2]}

    # the restart: the simulation's numbers, no drops, the second copies counted apart
    assert main(["merge", str(restarted), "--out", str(tmp_path / "r")]) == 0
    real = json.loads((tmp_path / "r" / "summary.json").read_text())
    sim = run_scenario(load_scenario(SCENARIO, SETS), tmp_path / "sim", progress=False)
    assert real["runtime"]["resumed"] == {"1": [_rounds_done_at_restart(restarted)]}
    assert abs(real["final"]["f1_macro_mean"] - sim["final"]["f1_macro_mean"]) <= 0.02
    assert real["comm"]["messages_sent"] == sim["comm"]["messages_sent"]
    assert real["comm"]["messages_dropped"] == 0 and real["comm"]["delivery_ratio"] == 1.0
    received = [json.loads((restarted / f"peer-{i}" / "results" / "peer.json").read_text())
                ["recorder"]["counters"][0]["messages_received"] for i in range(3)]
    assert received == [2 * ROUNDS] * 3
    assert sorted(real["runtime"]["clock_offsets"]) == ["0", "1", "2"]
    assert "resumes from its checkpoint" in (restarted / "peer-1" / "peer.log").read_text()

    # a results folder of another run, copied in: refused, naming it
    shutil.rmtree(missing / "peer-1" / "results")
    shutil.copytree(restarted / "peer-1" / "results", missing / "peer-1" / "results")
    capsys.readouterr()
    assert main(["merge", str(missing), "--out", str(tmp_path / "m2"), "--partial"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{missing / 'peer-1' / 'results' / 'peer.json'}: the results of run ")


    # the skewed clock: warned of by its neighbours, and measured; refused on both sides, by name
    warned, refused = skewed
    assert _said(warned, 0, 2) == ("over 10%: artifacts may be late", pytest.approx(0.3, abs=0.05))
    offsets = json.loads((warned / "peer-0" / "results" / "summary.json").read_text())["runtime"]["clock_offsets"]
    assert abs(offsets["2"]["offset_s"] - 0.3) <= offsets["2"]["round_trip_s"] / 2 + 0.02
    for host, neighbour, offset in ((2, 0, -0.8), (2, 1, -0.8), (0, 2, 0.8), (1, 2, 0.8)):
        assert _said(refused, host, neighbour) == ("over 50%: its artifacts would miss their rounds",
                                                   pytest.approx(offset, abs=0.05))
        assert not (refused / f"peer-{host}" / "results" / "checkpoint.pt").exists()

    # planned again over a bundle: refused without --force, every key kept byte for byte
    keys, plan = _keys(restarted), (restarted / "plan.json").read_bytes()
    capsys.readouterr()
    _plan(tmp_path, "restarted", "--round-period", "0.5", code=2)
    assert "--force" in capsys.readouterr().err
    assert _keys(restarted) == keys and len(keys) == 3 * 4 and (restarted / "plan.json").read_bytes() == plan


def _rounds_done_at_restart(bundle: Path) -> int:
    """The round peer 1 resumed at, as its results say."""
    return json.loads((bundle / "peer-1" / "results" / "peer.json").read_text())["resumed_from"][0]
