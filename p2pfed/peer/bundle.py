"""``p2pfed plan``: one self-contained folder per peer, to copy to the host that runs it.

Going from ``launch`` (every peer on 127.0.0.1) to a LAN used to mean copying peer files by hand and
editing endpoints and key paths. A plan takes the scenario and a hosts file (one address, and
optionally a port, per device) and writes ``OUT/peer-I/`` for every device:

- ``peer.yaml``: the peer file, every path in it relative to its folder;
- ``scenario.yaml``: the scenario fully resolved (overrides and seed applied, every default
  written), with the files it names (``dataset.path``, ``topology.file``, ``contacts.file``)
  copied into ``files/``;
- ``keys/``: the peer's own CURVE pair and its neighbours' public keys (nobody else's secret);
- ``start.sh``: ``p2pfed peer --config peer.yaml`` from the folder, with the Python that planned it
  (checked first; ``P2PFED_PYTHON`` names another), its output appended to ``peer.log``; results go
  to ``results/``.

``OUT/plan.json`` lists the peers, their endpoints and folders, and for a scenario run with another
method than its file names what that left out (``swapped``, as ``summary.json`` says it). After the
run, copy each host's ``results/`` back into its folder and ``p2pfed merge OUT`` writes the same
results files as ``p2pfed run`` (``peer/merge.py``). A folder that already holds a bundle is not
planned into again unless forced: re-planning makes new keys, which every host would need anew.
The folders hold nothing specific to the machine that wrote them, so a bundle run on loopback
(hosts all 127.0.0.1) is the bundle a user copies to real machines.
"""

from __future__ import annotations

import json
import shlex
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from p2pfed._version import __version__
from p2pfed.peer.config import PeerTiming, tcp_endpoint
from p2pfed.peer.identity import file_hash, new_run_id
from p2pfed.peer.keys import make_keys
from p2pfed.plugins import is_plugin_name
from p2pfed.scenario.build import peer_neighbours
from p2pfed.scenario.loader import FILE_FIELDS, dump, launch_problems
from p2pfed.scenario.spec import RunSpec
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


def existing_bundle(out: Path) -> list[Path]:
    """What an earlier plan wrote in ``out`` (its plan file and peer folders)."""
    found = [out / PLAN_FILE] if (out / PLAN_FILE).exists() else []
    return found + sorted(p.parent for p in out.glob("peer-*/peer.yaml"))


def replace_bundle(out: Path, force: bool) -> None:
    """Refuse to plan over an earlier bundle (its keys would change under the hosts that hold
    them), or with ``force`` remove it, results copied back into it included."""
    found = existing_bundle(out)
    if found and not force:
        raise ScenarioError([f"{out}: already holds a bundle ({len(found)} files and peer folders); planning again "
                             "makes new keys and a new run id, so every host needs its folder again: add --force "
                             "to replace it, or choose another --out"])
    for path in found:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def start_script(insecure: bool) -> str:
    """The peer's ``start.sh``: run with the interpreter (and p2pfed) this plan was made with,
    which an ``ssh host nohup`` finds without any PATH; checked first, so a host without it is
    told which is missing; the peer's output appended to ``peer.log`` (a restart keeps the first
    run's log). Its arguments (``-v``) go to ``p2pfed peer``."""
    python, version = shlex.quote(sys.executable), f"{sys.version_info.major}.{sys.version_info.minor}"
    return f"""#!/bin/sh
# Runs this peer from its folder: results go to ./results, its output is appended to ./peer.log.
# Planned with Python {version} at {sys.executable} and p2pfed {__version__};
# on a host where that is elsewhere, set P2PFED_PYTHON to a Python with p2pfed installed.
cd "$(dirname "$0")" || exit 2
PLANNED={python}
PYTHON="${{P2PFED_PYTHON:-$PLANNED}}"
if ! have=$("$PYTHON" -c 'import p2pfed; print(p2pfed.__version__)' 2>/dev/null); then
    echo "start.sh: $PYTHON (Python {version} with p2pfed {__version__}, as planned) is missing or has no" \\
         "p2pfed on this host: install it, or set P2PFED_PYTHON to a Python with p2pfed" >&2
    exit 2
fi
[ "$have" = "{__version__}" ] || echo "start.sh: p2pfed $have here, the bundle was planned with {__version__}" >&2
echo "start.sh: peer running, its output appended to $PWD/peer.log" >&2
exec "$PYTHON" -m p2pfed.cli.main peer --config peer.yaml{" --insecure" if insecure else ""} "$@" >> peer.log 2>&1
"""


def write_bundle(loaded: RunSpec, endpoints: list[str], out: Path, *, insecure: bool = False,
                 timing: PeerTiming = PeerTiming(), start_time: float | None = None,
                 force: bool = False) -> list[Path]:
    """One folder per device (see the module's docstring); returns their peer files.
    ``start_time``: the unix time every peer counts from (over contacts, simulated time 0);
    ``force``: replace a bundle already in ``out``."""
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
    replace_bundle(out, force)
    out.mkdir(parents=True, exist_ok=True)
    run_id = new_run_id()
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp)
        if not insecure:
            make_keys(keys, [f"peer-{i}" for i in range(n)])
        configs = [_peer_folder(out / f"peer-{i}", i, neighbours[i], endpoints, keys, loaded, scenario,
                                insecure=insecure, timing=timing, start_time=start_time, run_id=run_id)
                   for i in range(n)]
    plan = {"run_id": run_id, "scenario_hash": file_hash(out / "peer-0" / "scenario.yaml"),
            "scenario": loaded.source, "secure": not insecure, "edges": edges,
            "peers": [{"id": i, "endpoint": endpoints[i], "folder": f"peer-{i}"} for i in range(n)],
            **({} if loaded.swapped is None else {"swapped": loaded.swapped.to_dict()})}
    (out / PLAN_FILE).write_text(json.dumps(plan, indent=1) + "\n")
    return configs


def _peer_folder(folder: Path, i: int, neighbours: list[int], endpoints: list[str], keys: Path,
                 loaded: RunSpec, scenario: dict[str, Any], *, insecure: bool, timing: PeerTiming,
                 start_time: float | None, run_id: str) -> Path:
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
        "id": i, "run_id": run_id, "scenario": "scenario.yaml", "listen": endpoints[i],
        "neighbours": [{"id": j, "endpoint": endpoints[j]} for j in neighbours],
        "out": "results", **timing.fields(), **({} if start_time is None else {"start_time": start_time})}
    if not insecure:
        (folder / "keys").mkdir(exist_ok=True)
        for j in [i, *neighbours]:
            shutil.copy2(keys / f"peer-{j}.key", folder / "keys" / f"peer-{j}.key")
        shutil.copy2(keys / f"peer-{i}.key_secret", folder / "keys" / f"peer-{i}.key_secret")
        config["secret_key"] = f"keys/peer-{i}.key_secret"
        config["public_key"] = f"keys/peer-{i}.key"
        for nb in config["neighbours"]:
            nb["public_key"] = f"keys/peer-{nb['id']}.key"
    path = folder / "peer.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    start = folder / "start.sh"
    start.write_text(start_script(insecure))
    start.chmod(start.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path
