"""The README's performance table: each scale goal beside what its committed bench measured.

Every figure is read from a committed results file, never typed in:

- 10,000 and 100,000 devices: ``bench/scale.py``'s ``scale.csv`` in
  ``bench/results/scale/goal-10000/`` and ``goal-100000/`` (a few rounds; 100 rounds projected
  as the first round plus 99 times the mean of the later ones);
- FedSub over random waypoint for 8 simulated hours: ``/usr/bin/time -v``'s record of
  ``p2pfed run scenarios/synthetic-rwp-1000.yaml`` in ``bench/results/contacts-scale/``;
- the quickstart round against its training's FLOPs bound: ``bench/flops_bound.py``'s CSV
  (medians over its passes, CPU time);
- one run split over processes: ``bench/sharded.py``'s ``sharded.json``.

The goals are the targets the project set for a 2-core, 24 GiB machine.

    python bench/performance_table.py           # rewrites the README's table
    python bench/performance_table.py --check   # exit 1 when the README differs
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from pathlib import Path

from generated_files import with_block, write_or_check

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "bench" / "results"
SCALE_10K = RESULTS / "scale" / "goal-10000" / "scale.csv"
SCALE_100K = RESULTS / "scale" / "goal-100000" / "scale.csv"
RWP_8H = RESULTS / "contacts-scale" / "fedsub-8h-8f8a109.txt"
FLOPS = RESULTS / "flops-bound" / "flops_bound.csv"
SHARDED = RESULTS / "sharded" / "sharded.json"
BEGIN = "<!-- performance-table: begin (python bench/performance_table.py) -->"
END = "<!-- performance-table: end -->"
ROUNDS = 100   # the goals' run length


def _link(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return f"[{rel.parent.name}/]({rel.parent.as_posix()}/)"


def _scale_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _minutes_for_100_rounds(row: dict[str, str]) -> float:
    return (float(row["first_round_s"]) + (ROUNDS - 1) * float(row["s_per_round"])) / 60.0


def scale_cell(path: Path, minutes: float, gib: float) -> tuple[str, str]:
    """Per method: 100 rounds' projected minutes and the peak, or why the run did not happen."""
    rows = _scale_rows(path)
    parts, met = [], True
    for row in rows:
        if row["error"]:
            needs = re.search(r"needs about ([\d.]+ GiB)", row["error"])
            why = f"refused before it starts, needs about {needs.group(1)}" if needs else row["error"][:80]
            parts.append(f"{row['method']}: not run ({why})")
            met = False
            continue
        projected, peak = _minutes_for_100_rounds(row), float(row["peak_rss_mib"]) / 1024
        parts.append(f"{row['method']} {projected:.0f} min, {peak:.1f} GiB")
        met = met and projected <= minutes and peak <= gib
    rounds = "/".join(sorted({row["rounds"] for row in rows}))
    return f"projected from {rounds} rounds: " + "; ".join(parts), "yes" if met else "no"


def _elapsed_s(text: str) -> float:
    parts = [float(p) for p in text.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))


def rwp_cell(path: Path, minutes: float) -> tuple[str, str]:
    """The wall times of the recorded runs, and the commit they ran at."""
    text = path.read_text()
    walls = [_elapsed_s(m) for m in re.findall(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)]
    commit = re.search(r"# commit (\w+)", text)
    if not walls or commit is None:
        raise SystemExit(f"{path}: no 'Elapsed (wall clock)' line or '# commit' header")
    spread = " to ".join(f"{w / 60:.1f}" for w in sorted({min(walls), max(walls)}))
    met = "yes" if max(walls) <= 60 * minutes else "no"
    return f"FedSub {spread} min ({len(walls)} runs, at {commit.group(1)})", met


def flops_cell(path: Path, limits: dict[str, float]) -> tuple[str, str]:
    """Median CPU-time ratio to the bound per method, and the training alone for scale."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    ratio = {what: statistics.median(float(r["x_bound_cpu"]) for r in rows if r["what"] == what)
             for what in ["training alone", *limits]}
    cell = "; ".join(f"{what} {ratio[what]:.1f}×" for what in limits)
    cell += f" (training alone {ratio['training alone']:.1f}×)"
    return cell, "yes" if all(ratio[m] <= limit for m, limit in limits.items()) else "no"


def sharded_cell(path: Path) -> tuple[str, str]:
    """What the sharded run gave against one process, and its projected round times."""
    run = json.loads(path.read_text())
    projected = ", ".join(f"{p['s_per_round']:.2f} s on {p['machines']}" for p in run["projected"])
    cell = (f"{run['method']}, {run['devices']} devices on {run['shards']} shards: largest F1 difference "
            f"{run['max_f1_difference']:g}; a round projected at {projected} machines")
    return cell, "yes" if run["max_f1_difference"] == 0 else "no"


def section() -> str:
    rows = [
        ("10,000 devices, journal MLP: 100 rounds in ≤ 15 min, ≤ 16 GiB", *scale_cell(SCALE_10K, 15, 16), SCALE_10K),
        ("FedSub over random waypoint, 1,000 devices × 8 h: ≤ 5 min", *rwp_cell(RWP_8H, 5), RWP_8H),
        ("the quickstart's round against its training's FLOPs bound: gossip-avg ≤ 3×, FedSub ≤ 5×",
         *flops_cell(FLOPS, {"gossip-avg": 3.0, "fedsub": 5.0}), FLOPS),
        ("100,000 devices, small model: 100 rounds in ≤ 30 min, ≤ 16 GiB", *scale_cell(SCALE_100K, 30, 16), SCALE_100K),
        ("one run over processes (Dask): results equal to one process", *sharded_cell(SHARDED), SHARDED),
    ]
    out = [BEGIN, "", "| goal (2 cores, 24 GiB) | measured | met | bench |", "|---|---|---|---|"]
    out += [f"| {goal} | {measured} | {met} | {_link(path)} |" for goal, measured, met, path in rows]
    return "\n".join([*out, "", END])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the README differs")
    args = parser.parse_args(argv)
    wanted = {README: with_block(README.read_text(), BEGIN, END, section())}
    return write_or_check(wanted, args.check, "python bench/performance_table.py")


if __name__ == "__main__":
    sys.exit(main())
