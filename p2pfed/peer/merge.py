"""``p2pfed merge``: a planned run's results, copied back into its bundle, as one run's files.

Every file read here was carried between hosts by hand, so each problem names its file: a
missing or truncated ``plan.json`` or ``peer.json`` is one line saying which, never a bare JSON
parser message.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from p2pfed.peer.bundle import PLAN_FILE
from p2pfed.peer.identity import identity_problems
from p2pfed.peer.launcher import peers_runtime
from p2pfed.peer.results import merge, write_results
from p2pfed.results.recorder import round_float
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.loader import load_scenario
from p2pfed.scenario.swap import Swap
from p2pfed.textfile import read_json


def read_json_file(path: Path, what: str) -> Any:
    """The JSON in ``path``; missing, unreadable or damaged, one ScenarioError line naming it."""
    return read_json(path, what, ScenarioError)


def read_plan(bundle: Path) -> dict[str, Any]:
    """The bundle's ``plan.json``, checked to be one."""
    path = bundle / PLAN_FILE
    plan = read_json_file(path, "plan file")
    if not isinstance(plan, dict) or not isinstance(plan.get("peers"), list) or not plan["peers"]:
        raise ScenarioError([f"{path}: not a plan written by p2pfed plan (no peers)"])
    return plan


def collect_reports(bundle: Path, plan: dict[str, Any], skip: Collection[int] = ()
                    ) -> tuple[list[dict[str, Any]], list[int]]:
    """The ``peer.json`` of every planned peer not in ``skip`` whose results came back, and the
    ids of those whose did not; results of another run or peer are refused, naming the file."""
    reports, missing, foreign = [], [], []
    for peer in plan["peers"]:
        if peer["id"] in skip:
            continue
        f = bundle / peer["folder"] / "results" / "peer.json"
        if f.exists():
            report = read_json_file(f, f"results of peer {peer['id']}")
            foreign += identity_problems(str(f), plan, report, peer["id"])
            reports.append(report)
        else:
            missing.append(peer["id"])
    if foreign:
        raise ScenarioError(foreign)
    return reports, missing


def merge_bundle(bundle: Path, out: Path, *, runtime: dict[str, Any] | None = None,
                 wall_time_s: float | None = None, skip: Collection[int] = (),
                 partial: bool = False) -> dict[str, Any]:
    """The results files of a planned run whose peers' ``results/`` are back in their folders.

    ``runtime`` adds to (or replaces fields of) ``summary.json`` ``runtime``; ``wall_time_s``
    defaults to the last evaluation's elapsed seconds, the run's length as the peers saw it;
    the peers in ``skip`` (killed on purpose) are left out. A peer whose results did not come
    back is refused unless ``partial``: then the others are merged, and ``summary.json``
    ``partial`` names the missing."""
    plan = read_plan(bundle)
    reports, missing = collect_reports(bundle, plan, skip)
    if missing and (not partial or not reports):
        where = bundle / plan["peers"][missing[0]]["folder"] / "results" / "peer.json"
        fix = "merge the others with --partial" if reports else "no peer's results are there"
        raise ScenarioError([f"{bundle}: no results from peers {missing} ({where} not found): copy each host's "
                             f"results/ folder back into its peer folder, or {fix}"])
    loaded = load_scenario(bundle / plan["peers"][0]["folder"] / "scenario.yaml")
    if "swapped" in plan:   # the peers' scenario.yaml names the method swapped in; what it left out is here
        loaded = replace(loaded, swapped=Swap.from_dict(plan["swapped"]))
    n, edges = len(reports), int(plan["edges"])
    if wall_time_s is None:
        rows = merge(reports).rows
        wall_time_s = rows[-1]["sim_time_s"] if rows else 0.0
    extra = {"partial": {"missing_peers": missing, "merged_peers": [r["id"] for r in reports]}} if missing else {}
    return write_results(out, loaded, reports, wall_time_s=wall_time_s,
                         full_model_bytes=reports[0]["full_model_bytes"],
                         topology={"nodes": n, "edges": edges, "mean_degree": round_float(2 * edges / max(n, 1))},
                         runtime={"kind": "plan", "run_id": plan.get("run_id"),
                                  "scenario_hash": plan.get("scenario_hash"), "secure": plan["secure"],
                                  "hosts": sorted({p["endpoint"] for p in plan["peers"]}), **peers_runtime(reports),
                                  **(runtime or {})}, **extra)
