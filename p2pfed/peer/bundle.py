"""``p2pfed plan``: one self-contained folder per peer, to copy to the host that runs it.

Going from ``launch`` (every peer on 127.0.0.1) to a LAN used to mean copying peer files by hand and
editing endpoints and key paths. A plan takes the scenario and a hosts file (one address, and
optionally a port, per device) and writes ``OUT/peer-I/`` for every device:

- ``peer.yaml``: the peer file, every path in it relative to its folder;
- ``scenario.yaml``: the scenario fully resolved (overrides and seed applied, every default
  written), with the files it names (``dataset.path``, ``topology.file``, ``contacts.file``)
  copied into ``files/``;
- ``keys/``: the peer's own CURVE pair and its neighbours' public keys (nobody else's secret);
- ``start.sh``: ``p2pfed peer --config peer.yaml`` from the folder; results go to ``results/``.

``OUT/plan.json`` lists the peers, their endpoints and folders, and for a scenario run with another
method than its file names what that left out (``swapped``, as ``summary.json`` says it). After the
run, copy each host's ``results/`` back into its folder and ``p2pfed merge OUT`` writes the same
results files as ``p2pfed run``. The folders hold nothing specific to the machine that wrote them, so a bundle run
on loopback (hosts all 127.0.0.1) is the bundle a user copies to real machines.
"""

from __future__ import annotations

import json
import shutil
import stat
import tempfile
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from p2pfed.peer.config import PeerTiming, tcp_endpoint
from p2pfed.peer.keys import make_keys
from p2pfed.plugins import is_plugin_name
from p2pfed.scenario.build import peer_neighbours
from p2pfed.scenario.loader import FILE_FIELDS, dump, launch_problems, load_scenario
from p2pfed.scenario.spec import RunSpec
from p2pfed.scenario.swap import Swap
from p2pfed.scenario.errors import ScenarioError
from p2pfed.textfile import read_text
from p2pfed.yamltext import load_yaml

DEFAULT_PORT = 5555
PLAN_FILE = "plan.json"


def read_hosts(path: Path, devices: int) -> list[str]:
    """The ``tcp://address:port`` endpoint of each device from a hosts file::

        hosts:               # device i runs on hosts[i]
          - 192.168.1.10     # port 5555
          - 192.168.1.11:6000
          - {address: 192.168.1.12, port: 6001}

    Raises ScenarioError with one 'file: field: problem' line per problem."""
    try:
        raw = load_yaml(read_text(path, "hosts file", ScenarioError))
    except yaml.YAMLError as exc:
        raise ScenarioError([f"{path}: not YAML: {exc}"]) from None
    hosts = raw.get("hosts") if isinstance(raw, dict) else None
    if not isinstance(hosts, list):
        raise ScenarioError([f"{path}: hosts: a list with one address per device is required"])
    problems, endpoints = [], []
    if len(hosts) != devices:
        problems.append(f"{path}: hosts: lists {len(hosts)} hosts for the scenario's {devices} devices")
    for i, entry in enumerate(hosts):
        if isinstance(entry, dict) and set(entry) <= {"address", "port"} and "address" in entry:
            address, port = str(entry["address"]), entry.get("port", DEFAULT_PORT)
        elif isinstance(entry, str) and entry:   # "address" or "address:port"
            address, sep, port = entry.rpartition(":")
            if not sep:
                address, port = entry, DEFAULT_PORT
        else:
            problems.append(f"{path}: hosts.{i}: expected 'address', 'address:port' or {{address, port}}, "
                            f"got {entry!r:.60}")
            continue
        try:
            endpoints.append(tcp_endpoint(f"tcp://{address}:{port}"))
        except ValueError as exc:
            problems.append(f"{path}: hosts.{i}: {exc} (got {address}:{port})")
    seen: dict[str, int] = {}
    for i, endpoint in enumerate(endpoints):
        if endpoint in seen:
            problems.append(f"{path}: hosts.{i}: {endpoint} is also device {seen[endpoint]}'s; give each "
                            "device on one host its own port")
        seen.setdefault(endpoint, i)
    if problems:
        raise ScenarioError(problems)
    return endpoints


def write_bundle(loaded: RunSpec, endpoints: list[str], out: Path, *, insecure: bool = False,
                 timing: PeerTiming = PeerTiming(), start_time: float | None = None) -> list[Path]:
    """One folder per device (see the module's docstring); returns their peer files.
    ``start_time``: the unix time every peer counts from (over contacts, simulated time 0)."""
    if problems := launch_problems(loaded):
        raise ScenarioError(problems)
    sc = loaded.scenario
    named = [f"{f}: {v}" for f, v in (("algorithm.name", sc.algorithm.name), ("model.name", sc.model.name))
             if is_plugin_name(v) and ".py:" in v]
    if named:
        raise ScenarioError([f"{loaded.source}: {n}: a plan does not copy code; install it on every host "
                             "and name it module:Class" for n in named])
    n = loaded.num_devices
    if len(endpoints) != n:
        raise ScenarioError([f"{loaded.source}: the scenario has {n} devices, the hosts {len(endpoints)}"])
    neighbours, edges = peer_neighbours(loaded)
    scenario = dump(loaded)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp)
        if not insecure:
            make_keys(keys, [f"peer-{i}" for i in range(n)])
        configs = [_peer_folder(out / f"peer-{i}", i, neighbours[i], endpoints, keys, loaded,
                                scenario, insecure=insecure, timing=timing, start_time=start_time) for i in range(n)]
    plan = {"scenario": loaded.source, "secure": not insecure, "edges": edges,
            "peers": [{"id": i, "endpoint": endpoints[i], "folder": f"peer-{i}"} for i in range(n)],
            **({} if loaded.swapped is None else {"swapped": loaded.swapped.to_dict()})}
    (out / PLAN_FILE).write_text(json.dumps(plan, indent=1) + "\n")
    return configs


def _peer_folder(folder: Path, i: int, neighbours: list[int], endpoints: list[str], keys: Path,
                 loaded: RunSpec, scenario: dict[str, Any], *, insecure: bool, timing: PeerTiming,
                 start_time: float | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    own = json.loads(json.dumps(scenario))   # a copy whose file fields point into this folder
    for section, key in FILE_FIELDS:
        source = loaded.resolve(own[section][key])
        if source is not None:
            (folder / "files").mkdir(exist_ok=True)
            shutil.copy2(source, folder / "files" / source.name)
            own[section][key] = f"files/{source.name}"
    (folder / "scenario.yaml").write_text(yaml.safe_dump(own, sort_keys=False))
    config: dict[str, Any] = {
        "id": i, "scenario": "scenario.yaml", "listen": endpoints[i],
        "neighbours": [{"id": j, "endpoint": endpoints[j]} for j in neighbours],
        "out": "results", **timing.fields(), **({} if start_time is None else {"start_time": start_time})}
    if not insecure:
        (folder / "keys").mkdir(exist_ok=True)
        for j in [i, *neighbours]:
            shutil.copy2(keys / f"peer-{j}.key", folder / "keys" / f"peer-{j}.key")
        shutil.copy2(keys / f"peer-{i}.key_secret", folder / "keys" / f"peer-{i}.key_secret")
        config["secret_key"] = f"keys/peer-{i}.key_secret"
        for nb in config["neighbours"]:
            nb["public_key"] = f"keys/peer-{nb['id']}.key"
    path = folder / "peer.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    start = folder / "start.sh"
    start.write_text('#!/bin/sh\n# run this peer from its folder; results go to ./results\ncd "$(dirname "$0")" && '
                     f'exec p2pfed peer --config peer.yaml{" --insecure" if insecure else ""} "$@"\n')
    start.chmod(start.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def merge_bundle(bundle: Path, out: Path, *, runtime: dict[str, Any] | None = None,
                 wall_time_s: float | None = None, skip: Collection[int] = ()) -> dict[str, Any]:
    """The results files of a planned run whose peers' ``results/`` are back in their folders.

    ``runtime`` adds to (or replaces fields of) ``summary.json`` ``runtime``; ``wall_time_s``
    defaults to the last evaluation's elapsed seconds, the run's length as the peers saw it;
    the peers in ``skip`` (killed on purpose) are left out."""
    from p2pfed.peer.launcher import peers_runtime
    from p2pfed.peer.results import merge, write_results
    from p2pfed.results.recorder import round_float

    plan = json.loads((bundle / PLAN_FILE).read_text())
    reports, missing = [], []
    for peer in plan["peers"]:
        if peer["id"] in skip:
            continue
        f = bundle / peer["folder"] / "results" / "peer.json"
        if f.exists():
            reports.append(json.loads(f.read_text()))
        else:
            missing.append(f"peer {peer['id']}: {f} not found (copy the host's results/ folder back)")
    if missing:
        raise ScenarioError(missing)
    loaded = load_scenario(bundle / plan["peers"][0]["folder"] / "scenario.yaml")
    if "swapped" in plan:   # the peers' scenario.yaml names the method swapped in; what it left out is here
        loaded = replace(loaded, swapped=Swap.from_dict(plan["swapped"]))
    n, edges = len(reports), int(plan["edges"])
    if wall_time_s is None:
        rows = merge(reports).rows
        wall_time_s = rows[-1]["sim_time_s"] if rows else 0.0
    return write_results(out, loaded, reports, wall_time_s=wall_time_s,
                         full_model_bytes=reports[0]["full_model_bytes"],
                         topology={"nodes": n, "edges": edges, "mean_degree": round_float(2 * edges / max(n, 1))},
                         runtime={"kind": "plan", "secure": plan["secure"],
                                  "hosts": sorted({p["endpoint"] for p in plan["peers"]}), **peers_runtime(reports),
                                  **(runtime or {})})
