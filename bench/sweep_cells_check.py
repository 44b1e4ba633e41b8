"""One cell of every committed sweep, re-run with the current code, against the committed files.

For each sweep file in ``sweeps/`` the script finds the results folder it made under
``bench/results/`` (the ``--out`` its header names, else the folder whose ``sweep.json`` has its
name, else the folder whose README names the file), picks the cheapest point both the current grid
and the committed folder hold (the method and swept values with the smallest median committed wall
time, then the lowest seed; ``--skip-method local`` picks a method that exchanges), runs exactly
that cell as a ``p2pfed sweep`` worker does (a fresh process, one torch thread, ``run_cell`` into a
temporary folder) and compares every column both have: the cell's ``rounds.csv``, ``devices.csv``,
``dataset.json`` and ``summary.json`` figures, or, where the committed folder keeps no per-cell
files, its ``sweep.csv`` row or the older ``comm_bench.csv`` row and ``f1_over_time.csv`` curve.
Equal text is "same"; otherwise each differing column is listed old -> new with its largest absolute
difference, and the line says which commit made the committed figures. Wall time, the code version
and file paths are not figures and are left out; the scenario itself is compared in its canonical
form and named when it differs.

    python bench/sweep_cells_check.py --list
    nice -n 15 python bench/sweep_cells_check.py --only adversaries
    nice -n 15 python bench/sweep_cells_check.py --budget-min 60

``--code DIR`` runs the chosen cells with another checkout's code (``DIR/p2pfed``, its
``p2pfed run`` in a fresh process with one torch thread), to tell a code change from an
environment change when a figure differs: in a throwaway worktree of the commit that made them,

    git worktree add --detach /tmp/wt-old COMMIT
    nice -n 15 python bench/sweep_cells_check.py --only NAME --code /tmp/wt-old
    git worktree remove --force /tmp/wt-old

The exit status is 1 when a cell differs or fails, else 0.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = ROOT / "sweeps"
RESULTS = ROOT / "bench" / "results"
CELL_FILES = ("rounds.csv", "devices.csv")
NOT_FIGURES = {"wall_time_s", "code", "config", "scenario_file", "swapped"}
CSV_NOT_FIGURES = {"wall_time_s", "cell", "status", "error"}


# ---------------------------------------------------------------- where the committed cell is

@dataclass
class Committed:
    """What the committed folder holds for one point: a cell folder, or a table row (and curve)."""

    kind: str                           # cell | sweep-row | comm-bench
    wall_s: float | None
    folder: Path | None = None
    row: dict[str, str] | None = None
    curve: list[dict[str, str]] | None = None


@dataclass
class Target:
    """One sweep file, its committed folder, and the cell chosen to re-run (or why none)."""

    sweep_file: Path
    name: str
    folder: Path | None = None
    point: Any = None                   # p2pfed.sweeps.cells.Point
    committed: Committed | None = None
    why: str = ""                       # not comparable: the reason

    @property
    def estimate_s(self) -> float:
        wall = self.committed.wall_s if self.committed else None
        return math.inf if wall is None else wall

    def label(self) -> str:
        p = self.point
        values = ", ".join(f"{k}={_text(v)}" for k, v in p.values)
        return f"{p.method} seed {p.seed}" + (f", {values}" if values else "")


def _text(value: Any) -> str:
    from p2pfed.sweeps.aggregate import value_text
    return value_text(value)


def results_folder(sweep_file: Path, name: str) -> Path | None:
    """The folder a sweep file's results were committed in, or None."""
    header = re.search(r"--out\s+(bench/results/\S+)", sweep_file.read_text())
    if header and (ROOT / header.group(1)).is_dir():
        return ROOT / header.group(1)
    for manifest in sorted(RESULTS.rglob("sweep.json")):
        if json.loads(manifest.read_text()).get("name") == name:
            return manifest.parent
    if (RESULTS / name).is_dir():
        return RESULTS / name
    for readme in sorted(RESULTS.glob("*/README.md")):   # a folder a bench script wrote from the sweep
        if f"sweeps/{sweep_file.name}" in readme.read_text() and not (readme.parent / "sweep.json").is_file():
            return readme.parent
    return None


def _key(method: str, seed: int, values: Iterable[tuple[str, Any]]) -> str:
    return json.dumps([method, seed, [[k, v] for k, v in values]], sort_keys=True, default=str)


def _float(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def committed_cells(folder: Path, name: str) -> tuple[dict[str, Committed], str]:
    """Point key -> committed cell of a folder ``p2pfed sweep`` wrote, or ({}, why not)."""
    if not (folder / "sweep.json").is_file():
        return {}, ""
    manifest = json.loads((folder / "sweep.json").read_text())
    if manifest.get("name") != name:
        return {}, f"{_rel(folder)}/sweep.json is of another sweep ({manifest.get('name')})"
    walls = {}
    if (folder / "sweep.csv").is_file():
        walls = {r.get("cell", ""): _float(r.get("wall_time_s")) for r in _read_csv(folder / "sweep.csv")}
    found: dict[str, Committed] = {}
    for p in manifest.get("points", []):
        cell = folder / "cells" / f"{_folder_label(p['method'])}-{p['cell']['id'][:12]}"
        if (cell / "summary.json").is_file():
            found[_key(p["method"], p["seed"], p["values"])] = Committed("cell", walls.get(cell.name), folder=cell)
    if not found:
        named = len(manifest.get("points", []))
        return {}, f"{_rel(folder)}/sweep.json names {named} cells, none committed under cells/"
    return found, ""


def _folder_label(method: str) -> str:
    from p2pfed.results.files import folder_label
    return folder_label(method)


def committed_rows(folder: Path, points: list[Any], keys: list[str]) -> dict[str, Committed]:
    """Point key -> committed table row where the folder keeps no cells: a ``sweep.csv`` row
    (matched by method label, swept values and seed) or an older ``comm_bench.csv`` row."""
    from p2pfed.algorithms.registry import method_label

    found: dict[str, Committed] = {}
    if (folder / "sweep.csv").is_file():
        by_point = {(r["method"], *(r.get(k, "") for k in keys), r["seed"]): r for r in _read_csv(folder / "sweep.csv")}
        for p in points:
            row = by_point.get((method_label(p.method), *(_text(v) for _, v in p.values), str(p.seed)))
            if row is not None and row.get("status", "done") == "done":
                wall = _float(row.get("wall_time_s"))
                found[_key(p.method, p.seed, p.values)] = Committed("sweep-row", wall, row=row)
    elif (folder / "comm_bench.csv").is_file() and len(keys) == 1:
        rows = _read_csv(folder / "comm_bench.csv")
        curve = _read_csv(folder / "f1_over_time.csv") if (folder / "f1_over_time.csv").is_file() else []
        first = {p.method: p.values[0][1] for p in reversed(points)}   # the bench ran local at the first value
        for p in points:
            value = _text(p.values[0][1])
            for r in rows:
                local = r["sweep_value"] == "-" and p.values[0][1] == first[p.method]
                if r["algorithm"] == p.method and r["sweep_key"] == keys[0] and (r["sweep_value"] == value or local):
                    mine = [c for c in curve if c["algorithm"] == p.method and c["sweep_value"] in (value, "")]
                    found[_key(p.method, p.seed, p.values)] = Committed("comm-bench", _float(r.get("wall_time_s")),
                                                                       row=r, curve=mine)
    return found


def choose(target: Target, skip: Iterable[str] = ()) -> None:
    """Fill ``target`` with the cheapest point the grid and the committed folder share (methods in
    ``skip`` aside, unless the sweep has no other), or ``why``."""
    from p2pfed.scenario.loader import ScenarioError
    from p2pfed.sweeps.cells import expand
    from p2pfed.sweeps.spec import read_sweep

    folder = target.folder = results_folder(target.sweep_file, target.name)
    if folder is None:
        target.why = "no results folder under bench/results names this sweep"
        return
    try:
        sweep = read_sweep(target.sweep_file, (), None)
        points = expand(sweep)
    except ScenarioError as exc:
        target.why = f"the sweep file does not load with the current code: {exc.problems[0]}"
        return
    committed, why = committed_cells(folder, target.name)
    if not committed and not why:
        committed = committed_rows(folder, points, list(sweep.spec.grid))
        if not committed:
            target.why = (f"{_rel(folder)} has no per-cell files, no sweep.json and no table row of this grid "
                          f"(it holds {', '.join(sorted(p.name for p in folder.iterdir())[:6])})")
            return
    if not committed:
        target.why = why
        return
    shared = [p for p in points if _key(p.method, p.seed, p.values) in committed]
    shared = [p for p in shared if p.method not in skip] or shared
    if not shared:
        target.why = f"no point of the current grid is among the {len(committed)} committed ones (the grid changed)"
        return
    target.point, target.committed = _cheapest(shared, committed)


def _cheapest(points: list[Any], committed: dict[str, Committed]) -> tuple[Any, Committed]:
    """The method and swept values with the smallest median committed wall time, its lowest seed."""
    groups: dict[str, list[Any]] = {}
    for p in points:
        groups.setdefault(_key(p.method, 0, p.values), []).append(p)

    def cost(members: list[Any]) -> float:
        walls = [w for p in members if (w := committed[_key(p.method, p.seed, p.values)].wall_s) is not None]
        return statistics.median(walls) if walls else math.inf

    best = min(groups.values(), key=cost)
    point = min(best, key=lambda p: p.seed)
    return point, committed[_key(point.method, point.seed, point.values)]


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------- running one cell

def run_here(cell: dict[str, Any], out: str) -> dict[str, Any]:
    """A ``p2pfed sweep`` worker's run of one cell (one torch thread, the worker's environment)."""
    import torch

    from p2pfed.scenario.threads import WORKER_THREADS_ENV
    from p2pfed.sweeps.execute import run_cell

    os.environ[WORKER_THREADS_ENV] = "1"
    torch.set_num_threads(1)
    start = time.perf_counter()
    result = run_cell(cell, out)
    return {**result, "seconds": time.perf_counter() - start}


OLD_RUNNER = """
import os, sys, time, torch
os.environ["P2PFED_TORCH_THREADS"] = "1"
torch.set_num_threads(1)
from p2pfed.cli.main import main
start = time.perf_counter()
code = main(sys.argv[1:])
print(f"seconds={time.perf_counter() - start:.1f}", file=sys.stderr)
sys.exit(code)
"""


def run_with_code(code: Path, cell: dict[str, Any], out: Path) -> dict[str, Any]:
    """The same cell run by another checkout's ``p2pfed run``: ``--algorithm`` switches the method (an
    older loader kept the base method's options under ``--set algorithm.name=``), ``--set`` the rest."""
    from p2pfed.sweeps.cells import has_option
    from p2pfed.algorithms import algorithm_class

    overrides = cell["overrides"]
    plain = [o for o in overrides if not o.startswith("algorithm.")]
    known = [o for o in overrides if o.startswith("algorithm.")
             and has_option(algorithm_class(cell["method"]), o.partition("=")[0])]
    scenario = cell["scenario"] and str(code / Path(cell["scenario"]).relative_to(ROOT))
    argv = [*([scenario] if scenario else []), "--quiet", "--out", str(out),
            *(["--seed", str(cell["seed"])] if cell["seed"] is not None else []),
            "--algorithm", cell["method"], *(a for o in [*plain, *known] for a in ("--set", o))]
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", OLD_RUNNER, "run", *argv], cwd=code, env=env,
                          capture_output=True, text=True)
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("seconds=")]
    error = None if done.returncode == 0 else (lines or [f"exit {done.returncode}"])[-1]
    return {"id": cell["id"], "error": error, "seconds": time.perf_counter() - start}


def run_targets(targets: list[Target], jobs: int, code: Path | None, tmp: Path) -> dict[str, tuple[Path, dict]]:
    """Run each target's cell (``jobs`` at a time, each in a fresh process); name -> (folder, result)."""
    from p2pfed.sweeps import store

    done: dict[str, tuple[Path, dict]] = {}
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, max_tasks_per_child=1) as pool:
        futures = {}
        for t in targets:
            out = tmp / t.name
            if code is None:
                futures[t.name] = (store.cell_dir(out, t.point.cell),
                                   pool.submit(run_here, t.point.cell.to_dict(), str(out)))
            else:
                futures[t.name] = (out / "cell", pool.submit(run_with_code, code, t.point.cell.to_dict(), out / "cell"))
        for name, (folder, future) in futures.items():
            done[name] = (folder, future.result())
    return done


# ---------------------------------------------------------------- comparing

@dataclass
class Column:
    """One column (or figure) whose committed and new values differ."""

    where: str
    name: str
    detail: str
    max_abs: float | None = None


@dataclass
class Comparison:
    compared: list[str] = field(default_factory=list)     # "rounds.csv 14 columns x 20 rows", ...
    differs: list[Column] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)         # columns one side lacks; scenario changes


def compare_tables(where: str, old: list[dict[str, str]], new: list[dict[str, str]], result: Comparison,
                   skip: set[str] = CSV_NOT_FIGURES) -> None:
    """Every column both tables have, row by row."""
    old_cols = list(old[0]) if old else []
    new_cols = list(new[0]) if new else []
    common = [c for c in old_cols if c in new_cols and c not in skip]
    _one_sided(where, old_cols, new_cols, skip, result)
    if len(old) != len(new):
        result.differs.append(Column(where, "(rows)", f"{len(old)} -> {len(new)} rows"))
    result.compared.append(f"{where} {len(common)} columns x {min(len(old), len(new))} rows")
    for col in common:
        pairs = [(o.get(col, ""), n.get(col, "")) for o, n in zip(old, new)]
        if diff := _differ(pairs, [f"row {i + 1}" for i in range(len(pairs))]):
            result.differs.append(Column(where, col, *diff))


def _one_sided(where: str, old: list[str], new: list[str], skip: set[str], result: Comparison) -> None:
    only_old = [c for c in old if c not in new and c not in skip]
    only_new = [c for c in new if c not in old and c not in skip]
    if only_old or only_new:
        result.notes.append(f"{where}: only committed: {', '.join(only_old) or '-'}; "
                            f"only new: {', '.join(only_new) or '-'}")


def _differ(pairs: list[tuple[Any, Any]], places: list[str]) -> tuple[str, float | None] | None:
    """None when every pair reads the same; else (where and old -> new of the largest gap, max |diff|)."""
    wrong = [(place, o, n) for place, (o, n) in zip(places, pairs) if _norm(o) != _norm(n)]
    if not wrong:
        return None
    gaps = [(abs(a - b), place, o, n) for place, o, n in wrong
            if (a := _float(o)) is not None and (b := _float(n)) is not None and not (math.isnan(a) and math.isnan(b))]
    if len(gaps) == len(wrong):
        gap, place, o, n = max(gaps, key=lambda g: g[0])
        return f"{len(wrong)}/{len(pairs)} differ, largest at {place}: {o} -> {n}", gap
    place, o, n = wrong[0]
    return f"{len(wrong)}/{len(pairs)} differ, first at {place}: {str(o)[:60]} -> {str(n)[:60]}", None


def _norm(value: Any) -> str:
    """A value as text, so a CSV cell and a JSON number compare (None and '' alike, 1 and 1.0 alike)."""
    if value is None:
        return ""
    number = _float(value) if not isinstance(value, bool) else None
    if number is not None and not isinstance(value, str):
        return repr(float(number))
    if isinstance(value, str) and number is not None and re.fullmatch(r"-?\d+(\.\d*)?([eE][-+]?\d+)?", value):
        return repr(number)
    return str(value)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            if not prefix and k in NOT_FIGURES:
                continue
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(data, list):
        out = {}
        for i, v in enumerate(data):
            out.update(flatten(v, f"{prefix}{i}."))
        return out
    return {prefix.removesuffix("."): data}


def compare_figures(where: str, old: dict[str, Any], new: dict[str, Any], result: Comparison) -> None:
    """Every leaf both JSON files have (the figures; the keys in NOT_FIGURES aside)."""
    a, b = flatten(old), flatten(new)
    _one_sided(where, list(a), list(b), set(), result)
    common = [k for k in a if k in b]
    result.compared.append(f"{where} {len(common)} figures")
    for k in common:
        if diff := _differ([(a[k], b[k])], [k]):
            result.differs.append(Column(where, k, *diff))


def compare_scenario(old: dict[str, Any], new: dict[str, Any], result: Comparison) -> None:
    """The two runs' scenarios in canonical form (fields away from their defaults); a difference
    is noted, as it explains figures that differ."""
    from p2pfed.algorithms import algorithm_class
    from p2pfed.scenario.canonical import canonical

    old_config, new_config = old.get("config"), new.get("config")
    if not isinstance(old_config, dict) or not isinstance(new_config, dict):
        result.notes.append("scenario: the committed summary.json has no config to compare")
        return
    try:
        method = algorithm_class(new_config["algorithm"]["name"])
        a, b = flatten(canonical(old_config, method)), flatten(canonical(new_config, method))
    except Exception as exc:  # an older config the current schema cannot read
        result.notes.append(f"scenario: the committed config does not read with the current schema ({exc})")
        return
    changed = sorted(k for k in {*a, *b} if _norm(a.get(k)) != _norm(b.get(k)))
    changed = [k for k in changed if not k.startswith(("dataset.path", "topology.file", "contacts.file"))]
    if changed:
        result.notes.append("scenario differs: " + "; ".join(f"{k}: {a.get(k)} -> {b.get(k)}" for k in changed[:12]))


def compare_cell(committed: Committed, folder: Path) -> Comparison:
    result = Comparison()
    summary = json.loads((folder / "summary.json").read_text())
    if committed.kind == "cell":
        assert committed.folder is not None
        for name in CELL_FILES:
            if (committed.folder / name).is_file() and (folder / name).is_file():
                compare_tables(name, _read_csv(committed.folder / name), _read_csv(folder / name), result)
        if (committed.folder / "dataset.json").is_file() and (folder / "dataset.json").is_file():
            compare_figures("dataset.json", json.loads((committed.folder / "dataset.json").read_text()),
                            json.loads((folder / "dataset.json").read_text()), result)
        old_summary = json.loads((committed.folder / "summary.json").read_text())
        compare_figures("summary.json", old_summary, summary, result)
        compare_scenario(old_summary, summary, result)
    elif committed.kind == "sweep-row":
        from p2pfed.sweeps.aggregate import CELL_METRICS, _dig
        row = {col: _dig(summary, path) for col, path in CELL_METRICS.items()}
        compare_tables("sweep.csv row", [committed.row or {}], [{k: _csv(v) for k, v in row.items()}], result,
                       skip=CSV_NOT_FIGURES | {"method", "seed", *(k for k in (committed.row or {}) if k not in row)})
    else:
        rounds = _read_csv(folder / "rounds.csv")
        compare_tables("comm_bench.csv row", [committed.row or {}], [comm_bench_row(summary, rounds)], result,
                       skip=CSV_NOT_FIGURES | {"algorithm", "sweep_key", "sweep_value"})
        new_curve = [{"sim_time_s": r["sim_time_s"], "f1_macro_mean": r["f1_macro_mean"]} for r in rounds]
        compare_tables("f1_over_time.csv", committed.curve or [], new_curve, result,
                       skip=CSV_NOT_FIGURES | {"algorithm", "sweep_value"})
    return result


def _csv(value: Any) -> str:
    return "" if value is None else str(value)


def comm_bench_row(summary: dict[str, Any], rounds: list[dict[str, str]]) -> dict[str, str]:
    """The row the former ``bench/comm_bench.py`` wrote for one run (its columns, from the summary)."""
    comm, contacts, asyn = summary["comm"], summary.get("contacts", {}), summary.get("asynchronous", {})
    f1 = [float(r["f1_macro_mean"]) for r in rounds]
    row = {"contacts": contacts.get("contacts"),
           "contacts_per_device_per_hour": contacts.get("contacts_per_device_per_hour"),
           "f1_final": summary["final"]["f1_macro_mean"], "f1_final_std": summary["final"]["f1_macro_std"],
           "f1_mean_over_time": round(sum(f1) / len(f1), 6),
           "bytes_per_device": round(comm["bytes_sent_total"] / summary["devices"]),
           "bytes_wasted_per_device": round(comm["bytes_wasted"] / summary["devices"]),
           **{k: comm[k] for k in ("transfers_started", "transfers_completed", "transfers_aborted",
                                   "bytes_wasted", "delivery_ratio")},
           "mean_fused_age_s": asyn.get("mean_fused_age_s"), "trainings_per_device": asyn.get("trainings_per_device")}
    return {k: _csv(v) for k, v in row.items()}


# ---------------------------------------------------------------- the command

def report_line(t: Target, result: dict | None, folder: Path | None) -> tuple[str, list[str]]:
    """('same' | 'differs' | 'not comparable' | 'failed', the line and its detail lines)."""
    if t.point is None:
        return "not comparable", [f"{t.name}: not comparable: {t.why}"]
    held = t.committed.folder if t.committed and t.committed.folder else t.folder or ROOT
    where = f"{t.label()} ({_rel(held)})"
    if result is None or folder is None:
        return "not run", [f"{t.name}: not run: {where}, estimated {t.estimate_s:.0f} s"]
    if result.get("error") or not (folder / "summary.json").is_file():
        return "failed", [f"{t.name}: failed: {where}: {result.get('error')}"]
    assert t.committed is not None
    cmp = compare_cell(t.committed, folder)
    took = f"[{result['seconds']:.0f} s; committed by {made_by(t)}]"
    details = [f"    {c.where}: {c.name}: {c.detail}" + (f" (max |diff| {c.max_abs:.3g})" if c.max_abs else "")
               for c in cmp.differs] + [f"    note: {n}" for n in cmp.notes]
    if not cmp.differs:
        return "same", [f"{t.name}: same: {where}; {', '.join(cmp.compared)} {took}", *details]
    columns = sorted({f"{c.where}:{c.name}" for c in cmp.differs})
    return "differs", [f"{t.name}: differs in {len(columns)} of the compared columns: {where}; "
                       f"{', '.join(cmp.compared)} {took}", *details]


def made_by(t: Target) -> str:
    """The commit whose code made the committed figures: the cell's ``summary.json`` ``code``, else
    the last commit that touched the folder (a folder's report may be rebuilt later than its cells)."""
    c = t.committed
    if c is not None and c.folder is not None:
        code = json.loads((c.folder / "summary.json").read_text()).get("code") or {}
        if code.get("git_commit"):
            return f"code {code['git_commit'][:9]}" + (" (dirty)" if code.get("git_dirty") else "")
    folder = c.folder if c is not None and c.folder is not None else t.folder
    done = subprocess.run(["git", "log", "-1", "--format=%h", "--", str(folder)], cwd=ROOT,
                          capture_output=True, text=True)
    return f"git log {done.stdout.strip() or '?'}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", metavar="NAME",
                   help="this sweep only (its file's stem or name; repeatable)")
    p.add_argument("--list", action="store_true", help="show the chosen cells and their estimated cost, run nothing")
    p.add_argument("--jobs", type=int, default=1, help="cells run at once, each in its own process (default 1)")
    p.add_argument("--budget-min", type=float, metavar="M",
                   help="run the cheapest cells first while their estimated total stays within M minutes")
    p.add_argument("--skip-method", action="append", default=[], metavar="NAME",
                   help="choose a cell of another method where the sweep has one (e.g. local, which exchanges nothing)")
    p.add_argument("--code", type=Path, metavar="DIR", help="run the cells with this checkout's code")
    p.add_argument("--keep", type=Path, metavar="DIR", help="write the re-run cells here (default: a temporary folder)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error("--jobs: must be at least 1")
    return args


def targets_for(only: list[str] | None) -> list[Target]:
    import yaml

    targets = []
    for path in sorted(SWEEPS.glob("*.yaml")):
        name = (yaml.safe_load(path.read_text()) or {}).get("name") or path.stem
        if only and path.stem not in only and name not in only:
            continue
        targets.append(Target(path, name))
    if only and not targets:
        sys.exit(f"--only {', '.join(only)}: no sweep file in {_rel(SWEEPS)} has that name")
    return targets


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    targets = targets_for(args.only)
    for t in targets:
        choose(t, args.skip_method)
    runnable = sorted((t for t in targets if t.point is not None), key=lambda t: t.estimate_s)
    if args.list:
        for t in sorted(targets, key=lambda t: t.estimate_s):
            print(f"{t.name}: {t.label()} [{t.committed.kind}; committed wall {t.estimate_s:.1f} s]"
                  if t.point is not None and t.committed else f"{t.name}: not comparable: {t.why}")
        total = sum(t.estimate_s for t in runnable if math.isfinite(t.estimate_s))
        print(f"{len(runnable)} cells to run, {len(targets) - len(runnable)} not comparable; "
              f"estimated {total / 60:.1f} min at the committed wall times")
        return 0
    chosen, spent = [], 0.0
    for t in runnable:
        if args.budget_min is not None and spent + t.estimate_s > args.budget_min * 60:
            continue
        chosen.append(t)
        spent += t.estimate_s
    with tempfile.TemporaryDirectory(prefix="sweep-cells-") as scratch:
        tmp = args.keep.resolve() if args.keep else Path(scratch)
        start = time.perf_counter()
        runs = run_targets(chosen, args.jobs, args.code.resolve() if args.code else None, tmp)
        counts: dict[str, int] = {}
        for t in targets:
            folder, result = runs.get(t.name, (None, None))
            status, lines = report_line(t, result, folder)
            counts[status] = counts.get(status, 0) + 1
            print("\n".join(lines), flush=True)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    print(f"{len(targets)} sweeps: {summary}; run time {time.perf_counter() - start:.0f} s")
    return 1 if counts.get("differs") or counts.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
