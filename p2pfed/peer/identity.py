"""A planned run's identity: the run id ``p2pfed plan`` draws and the hash of the scenario file
it writes, carried by every bundle, peer file, ``peer.json`` and merged ``summary.json``.

Why: results folders travel between hosts by hand. Without an identity, a folder of another
run (or of a bundle planned again) merges silently into this one's numbers.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path


def new_run_id() -> str:
    """A fresh, random run id (12 hex digits)."""
    return secrets.token_hex(6)


def file_hash(path: Path) -> str:
    """The first 16 hex digits of the SHA-256 of a file's bytes (a scenario edited on one host
    changes it)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def checkpoint_fingerprint(peer: int, scenario_fingerprint: str, run_id: str | None) -> str:
    """What a peer's checkpoint must have been written for: this peer of this scenario, and of
    this planned run (a checkpoint left from an earlier plan of the same folder is refused)."""
    return json.dumps({"peer": peer, "scenario": json.loads(scenario_fingerprint),
                       **({} if run_id is None else {"run_id": run_id})}, sort_keys=True)


def identity_problems(where: str, plan: dict, report: dict, folder_id: int) -> list[str]:
    """Why a ``peer.json`` is not this plan's peer ``folder_id`` (empty: it is)."""
    if report.get("run_id") != plan.get("run_id"):
        return [f"{where}: the results of run {report.get('run_id')}, not of this plan's run {plan.get('run_id')} "
                "(another run's results/ folder, or one from before the bundle was planned again)"]
    if report.get("id") != folder_id:
        return [f"{where}: the results of peer {report.get('id')}, copied into peer {folder_id}'s folder"]
    if report.get("scenario_hash") != plan.get("scenario_hash"):
        return [f"{where}: ran a scenario.yaml other than the one planned (hash {report.get('scenario_hash')}, "
                f"planned {plan.get('scenario_hash')})"]
    return []
