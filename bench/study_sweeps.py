"""Each study design's sweep files, generated from its arms, and the one command that runs them.

A design (``studies/<study>.yaml``) declares arms: a method and the settings that make it that
arm. A sweep file runs methods × one swept key × seeds, so the arms become a few sweep files:

- the arms of a method that appears once (the baselines) share one file, each arm's own settings
  under ``method_set``;
- the arms of a method that appears more than once (SAFL's rates, FedSub's extraction rules) are
  grouped by every varying setting but one, which is swept (``grid``): every point of every
  file is an arm, no arm is run twice, and no point is left out.

The design's ``settings`` go under ``set``, except a method's own options (``algorithm.<method>.x``),
which go under that method's ``method_set`` so that no other method with an option of that name
gets them. Seeds are 1 to the design's n. A design with several scenarios gets the files once
per scenario.

    python bench/study_sweeps.py                        # write sweeps/<study>-*.yaml for every design
    python bench/study_sweeps.py --check                # exit 1 if a committed file differs
    python bench/study_sweeps.py --run studies/safl-as-paper.yaml --workers 2

``--run`` runs every sweep file of one study into ``bench/results/<study>/<sweep>/``, from a clean
working tree only, and writes the commit to ``bench/results/<study>/COMMIT``; it refuses to add
runs of another commit to a study's folder (all runs of a study come from one commit).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import study_power
import yaml

from p2pfed.algorithms import ALGORITHMS
from p2pfed.scenario.fields import METHODS_PREFIX

ROOT = study_power.ROOT
STUDIES, SWEEPS, RESULTS = ROOT / "studies", ROOT / "sweeps", ROOT / "bench" / "results"


def designs() -> list[Path]:
    """The designs with arms (a matrix design names its one sweep file instead)."""
    return sorted(p for p in STUDIES.glob("*.yaml")
                  if p.name != "claims.yaml" and study_power.load(p).get("design") != "matrix")


def _owner(key: str) -> tuple[str, str] | None:
    """(method, ``algorithm.option``) for a design's ``algorithm.<method>.<option>`` key, else None."""
    head, _, rest = key.partition(".")
    if head != METHODS_PREFIX:
        return None
    method, _, option = rest.partition(".")
    return method, f"{METHODS_PREFIX}.{option}"


def arm_value(design: dict[str, Any], method: str, arm: dict[str, Any], key: str) -> Any:
    """What an arm runs ``key`` at: its own setting, the design's, or the method's default."""
    if key in arm.get("set", {}):
        return arm["set"][key]
    if key in design["settings"]:
        return design["settings"][key]
    return ALGORITHMS[method].Options.model_fields[key.rpartition(".")[2]].default


def _groups(design: dict[str, Any]) -> list[tuple[str, list[str], str | None]]:
    """(label, arms, swept key) per sweep file of one scenario; the swept key is None for the
    baselines' file."""
    by_method: dict[str, list[str]] = defaultdict(list)
    for name, arm in design["arms"].items():
        by_method[arm["method"]].append(name)
    baselines = [arms[0] for arms in by_method.values() if len(arms) == 1]
    out: list[tuple[str, list[str], str | None]] = [("baselines", baselines, None)] if baselines else []
    for method, arms in by_method.items():
        if len(arms) == 1:
            continue
        keys = sorted({k for a in arms for k in design["arms"][a].get("set", {})})
        values = {k: [arm_value(design, method, design["arms"][a], k) for a in arms] for k in keys}
        varying = [k for k in keys if len({repr(v) for v in values[k]}) > 1]
        swept = max(varying, key=lambda k: len({repr(v) for v in values[k]}))
        rest = [k for k in varying if k != swept]
        parts: dict[tuple[str, ...], list[str]] = defaultdict(list)
        for i, arm in enumerate(arms):
            parts[tuple(repr(values[k][i]) for k in rest)].append(arm)
        for fixed, members in parts.items():
            label = "-".join([method, *(f"{k.rpartition('.')[2]}-{yaml.safe_load(v)}"
                                        for k, v in zip(rest, fixed, strict=True))])
            out.append((label, members, swept))
    return out


def _sweep(design: dict[str, Any], scenario: str, arms: list[str], swept: str | None) -> dict[str, Any]:
    """One sweep file's content (without its header) for ``arms``, sweeping ``swept``."""
    specs = [design["arms"][a] for a in arms]
    methods = list(dict.fromkeys(s["method"] for s in specs))
    common = {k: v for k, v in design["settings"].items() if _owner(k) is None}
    own: dict[str, dict[str, Any]] = defaultdict(dict)
    for key, value in design["settings"].items():
        if (owner := _owner(key)) is not None and owner[0] in methods:
            own[owner[0]][owner[1]] = value
    grid: dict[str, list[Any]] = {}
    for spec in specs:
        for key, value in spec.get("set", {}).items():
            owner = _owner(key)
            if key != swept:
                own[spec["method"]][owner[1] if owner is not None else key] = value
    if swept is not None:   # one method's arms: the swept key's value per arm, never also fixed
        method, target = specs[0]["method"], (_owner(swept) or ("", swept))[1]
        grid[target] = [arm_value(design, method, spec, swept) for spec in specs]
        own[method].pop(target, None)
    sweep: dict[str, Any] = {"scenario": f"../{design['scenarios'][scenario]}", "methods": methods,
                             "seeds": list(range(1, design["power"]["n"] + 1)), "set": common}
    if own:
        sweep["method_set"] = {m: own[m] for m in methods if own.get(m)}
    if grid:
        sweep["grid"] = grid
    return sweep


def sweeps(path: Path) -> dict[Path, str]:
    """Every sweep file of one design, by path, as text."""
    design = study_power.load(path)
    study, several = design["study"], len(design["scenarios"]) > 1
    out = {}
    for scenario in design["scenarios"]:
        for label, arms, swept in _groups(design):
            name = "-".join([study, *([scenario] if several else []), label])
            body = {"name": name, "description": f"{study} ({path.name}), scenario {scenario}: arms {', '.join(arms)}",
                    **_sweep(design, scenario, arms, swept)}
            header = (f"# Generated from studies/{path.name} by `python bench/study_sweeps.py`: edit the design, "
                      f"not this file.\n# Arms: {', '.join(arms)}. The whole study, from a clean working tree:\n"
                      f"#   python bench/study_sweeps.py --run studies/{path.name} --workers 2\n")
            text = yaml.safe_dump(body, sort_keys=False, width=100, default_flow_style=None)
            out[SWEEPS / f"{name}.yaml"] = header + text
    return out


def run(path: Path, workers: int) -> int:
    """Every sweep of one study into bench/results/<study>/, all from the current commit."""
    if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                      text=True, check=True).stdout.strip():
        print("study_sweeps: commit first: a study's runs must come from one commit", file=sys.stderr)
        return 2
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    study = study_power.load(path)["study"]
    folder = RESULTS / study
    stamp = folder / "COMMIT"
    if stamp.is_file() and stamp.read_text().strip() != commit:
        print(f"study_sweeps: {folder} holds runs of commit {stamp.read_text().strip()}; re-run them all at this "
              f"one into a new folder, never pool commits", file=sys.stderr)
        return 2
    folder.mkdir(parents=True, exist_ok=True)
    stamp.write_text(commit + "\n")
    for sweep in sweeps(path):
        command = [sys.executable, "-m", "p2pfed.cli.main", "sweep", str(sweep), "--out",
                   str(folder / sweep.stem), "--workers", str(workers), "--resume"]
        print("+", " ".join(command), flush=True)
        if subprocess.run(command, cwd=ROOT).returncode != 0:
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a committed file differs")
    parser.add_argument("--run", type=Path, help="run every sweep of this design")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    if args.run is not None:
        return run(args.run, args.workers)
    stale = []
    for design in designs():
        for path, text in sweeps(design).items():
            if args.check:
                stale += [] if path.is_file() and path.read_text() == text else [path.name]
            else:
                path.write_text(text)
    if stale:
        print(f"stale sweep files (run python bench/study_sweeps.py): {', '.join(stale)}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
