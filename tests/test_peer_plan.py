"""``p2pfed plan`` / ``p2pfed merge``: one self-contained, secure (CURVE) folder per peer, run
unchanged by its own start.sh, merged into the simulator's results files (issue 31, goal 5)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import p2pfed
from p2pfed.cli.main import main
from p2pfed.engine.runner import run_scenario
from p2pfed.peer.launcher import free_ports
from p2pfed.scenario.loader import load_scenario
from tests.peer_support import SCENARIO, TINY

SWAP = "algorithm.name=gossip-avg"   # the scenario file's method is fedsub


def _table(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _plan(tmp_path: Path, capsys, hosts: list, *extra: str) -> tuple[int, str]:
    hosts_file = tmp_path / "hosts.yaml"
    hosts_file.write_text(yaml.safe_dump({"hosts": hosts}))
    code = main(["plan", str(SCENARIO), "--hosts", str(hosts_file), "--out", str(tmp_path / "bundle"),
                 "--round-timeout", "20", *sum((["--set", s] for s in TINY), []), *extra])
    return code, capsys.readouterr().err


@pytest.mark.slow   # three peer processes from their start scripts; in the slow set .ci/run runs
def test_a_planned_bundle_runs_unchanged_from_its_start_scripts_and_merges_like_a_simulation(tmp_path, capsys):
    """Run with another method than the scenario file's, whose swap the merged results say too."""
    ports = free_ports(3)
    code, err = _plan(tmp_path, capsys, [f"127.0.0.1:{p}" for p in ports], "--set", SWAP)
    assert code == 0, err
    bundle = tmp_path / "bundle"
    # Moved elsewhere, as a user copies folders to hosts: nothing in them points back here.
    moved = tmp_path / "elsewhere"
    shutil.move(bundle, moved)
    for i in range(3):
        folder = moved / f"peer-{i}"
        for name in ("peer.yaml", "scenario.yaml"):
            assert str(tmp_path) not in (folder / name).read_text(), name
        assert sorted(p.name for p in (folder / "keys").iterdir()) == sorted(
            [f"peer-{j}.key" for j in range(3)] + [f"peer-{i}.key_secret"])   # its own secret only
    # start.sh runs the Python that planned it: p2pfed need not be on the PATH (ssh host nohup ...)
    env = {k: v for k, v in os.environ.items() if k != "P2PFED_PYTHON"} | {"PATH": "/usr/bin:/bin"}
    (moved / "peer-0" / "peer.log").write_text("an earlier start's log\n")
    procs = [subprocess.Popen(["sh", str(moved / f"peer-{i}" / "start.sh"), *(["-v"] if i == 0 else [])], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(3)]
    outputs = [p.communicate(timeout=300)[0].decode() for p in procs]
    logs = [(moved / f"peer-{i}" / "peer.log").read_text() for i in range(3)]
    assert [p.returncode for p in procs] == [0, 0, 0], logs
    assert all(o.startswith("start.sh: peer running, its output appended to") for o in outputs), outputs
    assert all("WITHOUT encryption" not in log for log in logs)          # CURVE, the default
    plan = json.loads((moved / "plan.json").read_text())
    assert logs[0].startswith("an earlier start's log\n")                # appended to, not overwritten
    assert logs[1].splitlines()[0] == (
        f"p2pfed peer 1 (run {plan['run_id']}): listening on tcp://127.0.0.1:{ports[1]}, neighbours "
        f"0 at tcp://127.0.0.1:{ports[0]}, 2 at tcp://127.0.0.1:{ports[2]}; CURVE")
    assert [line.split(" done")[0] for line in logs[0].splitlines() if " done at " in line] == [
        f"INFO p2pfed.peer: peer 0: round {r}" for r in range(3)]             # -v: a line per round
    assert " done at " not in logs[1]
    assert main(["merge", str(moved), "--out", str(tmp_path / "merged")]) == 0
    real = json.loads((tmp_path / "merged" / "summary.json").read_text())
    sim = run_scenario(load_scenario(SCENARIO, [*TINY, SWAP]), tmp_path / "sim", progress=False)
    assert real["runtime"]["kind"] == "plan" and real["runtime"]["secure"] is True
    # the run's identity, in every results folder
    assert real["runtime"]["run_id"] == plan["run_id"] and real["runtime"]["scenario_hash"] == plan["scenario_hash"]
    for i in range(3):
        assert json.loads((moved / f"peer-{i}" / "results" / "peer.json").read_text())["run_id"] == plan["run_id"]
        assert json.loads((moved / f"peer-{i}" / "results" / "summary.json").read_text())["runtime"]["run_id"] \
            == plan["run_id"]
    assert real["devices"] == 3 and real["comm"]["messages_dropped"] == 0
    assert real["comm"]["messages_sent"] == sim["comm"]["messages_sent"]
    assert abs(real["final"]["f1_macro_mean"] - sim["final"]["f1_macro_mean"]) <= 0.02
    # every F1 figure, as the simulator gives it computing as each peer does (one device at a time,
    # one thread)
    alone = ["engine.batched_training=false", "engine.torch_threads=1"]
    run_scenario(load_scenario(SCENARIO, [*TINY, SWAP, *alone]), tmp_path / "alone", progress=False)
    f1_columns = [c for c in _table(tmp_path / "alone" / "rounds.csv")[0] if c.startswith("f1_")]
    assert [{c: r[c] for c in f1_columns} for r in _table(tmp_path / "merged" / "rounds.csv")] == \
        [{c: r[c] for c in f1_columns} for r in _table(tmp_path / "alone" / "rounds.csv")]
    assert [(r["device"], r["f1_macro"]) for r in _table(tmp_path / "merged" / "devices.csv")] == \
        [(r["device"], r["f1_macro"]) for r in _table(tmp_path / "alone" / "devices.csv")]
    assert real["config"] == sim["config"]                                 # the same resolved scenario
    assert real["swapped"] == sim["swapped"] and real["swapped"]["to"] == "gossip-avg"


def test_start_sh_says_which_python_is_missing(tmp_path, capsys):
    code, err = _plan(tmp_path, capsys, ["127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"], "--insecure")
    assert code == 0, err
    start = tmp_path / "bundle" / "peer-0" / "start.sh"
    done = subprocess.run(["sh", str(start)], env={**os.environ, "P2PFED_PYTHON": "/nowhere/python3"},
                          capture_output=True, text=True, timeout=30)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"start.sh: /nowhere/python3 (Python {version} with p2pfed {p2pfed.__version__}, as planned) is missing "
        "or has no p2pfed on this host: install it, or set P2PFED_PYTHON to a Python with p2pfed"]
    assert sys.executable in start.read_text()


def test_bad_hosts_files_are_one_line_per_problem(tmp_path, capsys):
    code, err = _plan(tmp_path, capsys, ["127.0.0.1:7000", "127.0.0.1:7000", {"adress": "x"}, "h:99999"])
    hosts = tmp_path / "hosts.yaml"
    assert code == 2
    assert err.strip().splitlines() == [
        f"{hosts}: hosts: lists 4 hosts for the scenario's 3 devices",
        f"{hosts}: hosts.2: expected 'address', 'address:port' or {{address, port}}, got {{'adress': 'x'}}",
        f"{hosts}: hosts.3: must be tcp://host:port with a port in 1..65535 (got h:99999)",
        f"{hosts}: hosts.1: tcp://127.0.0.1:7000 is also device 0's; give each device on one host its own port"]
    assert not (tmp_path / "bundle").exists()


@pytest.mark.parametrize("entry, endpoint", [("10.0.0.7", "tcp://10.0.0.7:5555"),
                                             ({"address": "10.0.0.7", "port": 6000}, "tcp://10.0.0.7:6000")])
def test_a_host_without_a_port_gets_the_default(tmp_path, capsys, entry, endpoint):
    code, err = _plan(tmp_path, capsys, [entry, "10.0.0.8", "10.0.0.9"], "--insecure")
    assert code == 0, err
    peer = yaml.safe_load((tmp_path / "bundle" / "peer-0" / "peer.yaml").read_text())
    assert peer["listen"] == endpoint and "secret_key" not in peer
    assert "--insecure" in (tmp_path / "bundle" / "peer-0" / "start.sh").read_text()
