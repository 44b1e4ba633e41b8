"""``p2pfed launch``: a scenario run by real peer processes on 127.0.0.1, merged like ``p2pfed run``.

The scenario's topology becomes neighbour lists, free loopback ports become endpoints, each peer
gets a peer file (and a CURVE key pair unless insecure) under ``OUT/peers/peer-I/``, and N
processes of ``p2pfed peer`` run it. Their ``peer.json`` files are then merged into the same
``rounds.csv`` / ``devices.csv`` / ``summary.json`` / ``plot.png`` as a simulated run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from p2pfed.peer.config import PeerTiming
from p2pfed.peer.contacts import contact_start_time
from p2pfed.peer.keys import make_keys
from p2pfed.plugins import path_entries
from p2pfed.peer.results import write_results
from p2pfed.results.recorder import round_float
from p2pfed.scenario.build import peer_neighbours
from p2pfed.scenario.loader import launch_problems
from p2pfed.scenario.spec import RunSpec
from p2pfed.textfile import read_json
from p2pfed.scenario.errors import ScenarioError

LOOPBACK = "127.0.0.1"


def free_ports(n: int) -> list[int]:
    """``n`` distinct tcp ports free on loopback right now (held open together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Plan:
    """Everything needed to start the peers of one launch."""

    configs: list[Path]
    out_dirs: list[Path]
    start_time: float
    num_edges: int
    insecure: bool


def prepare(loaded: RunSpec, scenario_file: Path | None, overrides: list[str], seed: int | None,
            out: Path, peers: int | None, *, insecure: bool, timing: PeerTiming = PeerTiming()) -> Plan:
    """Write one peer file per device of the scenario (and keys unless insecure)."""
    sc = loaded.scenario
    if problems := launch_problems(loaded):
        raise ScenarioError(problems)
    n = loaded.num_devices
    if peers is not None and peers != n:
        hint = ("--set dataset.partition.num_devices=N" if sc.dataset.partition.kind != "natural"
                else {"synthetic": "--set dataset.synthetic.num_devices=N",
                      "wisdm": "--set dataset.users=[...]"}.get(sc.dataset.name))
        raise ValueError(f"--peers {peers}: the scenario {loaded.source} has {n} devices"
                         + (f" ({hint} to change it)" if hint else ""))
    stale = sorted(out.glob("peers/peer-*/checkpoint.pt"))
    if stale:
        raise ValueError(f"{out}: holds checkpoints of an earlier launch ({stale[0]}); peers would resume "
                         "from them — choose another --out or delete that folder")
    neighbour_lists, edges = peer_neighbours(loaded)
    ports = free_ports(n)
    endpoints = [f"tcp://{LOOPBACK}:{p}" for p in ports]
    keys_dir = out / "keys"
    if not insecure:
        make_keys(keys_dir, [f"peer-{i}" for i in range(n)])
    start_time = contact_start_time(n) if sc.contacts.kind != "none" or timing.shared_grid else time.time()
    configs, out_dirs = [], []
    for i in range(n):
        d = out / "peers" / f"peer-{i}"
        d.mkdir(parents=True, exist_ok=True)
        neighbours = [{"id": j, "endpoint": endpoints[j]} for j in neighbour_lists[i]]
        if not insecure:
            for nb in neighbours:
                nb["public_key"] = str((keys_dir / f"peer-{nb['id']}.key").resolve())
        config: dict[str, Any] = {
            "id": i, "scenario": str(scenario_file.resolve()) if scenario_file else None,
            "overrides": list(overrides), "seed": seed, "listen": endpoints[i],
            "neighbours": neighbours, "out": str(d.resolve()), "start_time": start_time,
            **timing.fields(),
        }
        if not insecure:
            config["secret_key"] = str((keys_dir / f"peer-{i}.key_secret").resolve())
        path = d / "peer.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        configs.append(path)
        out_dirs.append(d)
    return Plan(configs, out_dirs, start_time, edges, insecure)


def peer_environment() -> dict[str, str]:
    """A peer process's environment: this one's, with the folders of the user's own code (a
    method or model named ``module:Name``) on ``PYTHONPATH``, so the peer imports what the
    launcher did."""
    env = os.environ.copy()
    entries = [*path_entries(), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    if entries:
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(entries))
    return env


def spawn(config: Path, *, insecure: bool, verbose: bool = False) -> subprocess.Popen:
    """Start one ``p2pfed peer`` process; its output goes to a ``.log`` file beside its config."""
    cmd = [sys.executable, "-m", "p2pfed.cli.main"] + (["-v"] if verbose else []) + \
          ["peer", "--config", str(config)] + (["--insecure"] if insecure else [])
    log = config.with_suffix(".log").open("ab")
    try:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=peer_environment())
    finally:
        log.close()


def wait_all(procs: list[subprocess.Popen], timeout_s: float) -> list[int | None]:
    """Exit codes (None: still running at the deadline, then killed)."""
    deadline = time.monotonic() + timeout_s
    codes: list[int | None] = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(deadline - time.monotonic(), 0.01)))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            codes.append(None)
    return codes


def recovery_totals(reports: list[dict[str, Any]]) -> dict[str, int]:
    """Resend requests and re-sent frames over all peers (apart from ``comm``: see peer/recovery.py)."""
    totals: dict[str, int] = {}
    for r in reports:
        for key, value in r.get("recovery", {}).items():
            totals[key] = totals.get(key, 0) + value
    return totals


def peers_runtime(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``summary.json`` ``runtime`` says of the peers themselves, however they were started."""
    return {"resumed": {str(r["id"]): r["resumed_from"] for r in reports if r["resumed_from"]},
            "ignored_peers": {str(r["id"]): r["ignored"] for r in reports if r["ignored"]},
            "send_failed": sum(r["send_failed"] for r in reports),
            # [round, neighbours] whenever a peer stopped waiting for neighbours at a round's deadline
            "timed_out": {str(r["id"]): r["timed_out"] for r in reports if r.get("timed_out")},
            # the neighbours from which not one message reached a peer in the whole run
            "never_heard": {str(r["id"]): r["never_heard"] for r in reports if r.get("never_heard")},
            # per peer, each neighbour's clock minus its own (seconds) and the round trip it was read over
            "clock_offsets": {str(r["id"]): r["clock_offsets"] for r in reports if r.get("clock_offsets")},
            "recovery": recovery_totals(reports)}


def collect(loaded: RunSpec, plan: Plan, out: Path, wall_time_s: float) -> dict[str, Any]:
    """Merge the peers' ``peer.json`` files into the run's results files; return the summary."""
    reports = []
    for i, d in enumerate(plan.out_dirs):
        f = d / "peer.json"
        if not f.exists():
            raise RuntimeError(f"peer {i} wrote no results (see {d / 'peer.log'})")
        reports.append(read_json(f, f"results of peer {i}", RuntimeError))
    n = len(reports)
    return write_results(out, loaded, reports, wall_time_s=wall_time_s,
                         full_model_bytes=reports[0]["full_model_bytes"],
                         topology={"nodes": n, "edges": plan.num_edges,
                                   "mean_degree": round_float(2 * plan.num_edges / max(n, 1))},
                         runtime={"kind": "launch", "secure": not plan.insecure, "host": LOOPBACK,
                                  **peers_runtime(reports)})


def launch(loaded: RunSpec, scenario_file: Path | None, overrides: list[str], seed: int | None,
           out: Path, peers: int | None, *, insecure: bool, timeout_s: float = 3600.0,
           timing: PeerTiming = PeerTiming(),
           verbose: bool = False) -> dict[str, Any]:
    """Prepare, run and merge; raises RuntimeError naming the peers that failed."""
    started = time.perf_counter()
    plan = prepare(loaded, scenario_file, overrides, seed, out, peers, insecure=insecure,
                   timing=timing)
    # SIGTERM must still run the cleanup below, or the peers would outlive the launcher.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    procs = [spawn(c, insecure=insecure, verbose=verbose) for c in plan.configs]
    try:
        codes = wait_all(procs, timeout_s)
    finally:
        signal.signal(signal.SIGTERM, previous)
        for p in procs:
            if p.poll() is None:
                p.kill()
    failed = [i for i, c in enumerate(codes) if c != 0]
    if failed:
        raise RuntimeError(f"peers {failed} failed (exit codes {[codes[i] for i in failed]}); "
                           f"see {out}/peers/peer-I/peer.log")
    return collect(loaded, plan, out, time.perf_counter() - started)

