"""Wall time of one sweep on 1 worker and on N workers, and whether their numbers are identical.

Runs ``p2pfed sweep SWEEP --workers 1`` and ``--workers N`` one after the other (fresh output
folders, so every cell runs in both), times each whole command, records the load average around
it (the machine may be shared), and compares the two sweep.csv files column by column, wall time
aside. Writes ``speedup.json`` and the N-worker run's sweep.csv, summary.csv and plots to --results.

    python bench/sweep_speedup.py sweeps/quickstart-speedup.yaml --results bench/results/sweep-speedup
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def timed_sweep(sweep: Path, out: Path, workers: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    load_before = os.getloadavg()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "p2pfed.cli.main", "sweep", str(sweep), "--out", str(out),
                           "--workers", str(workers), "--quiet"], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"sweep on {workers} worker(s) failed ({done.returncode}):\n{done.stderr}")
    return {"workers": workers, "wall_s": round(wall, 1), "load_avg_1min_before": round(load_before[0], 2),
            "load_avg_1min_after": round(os.getloadavg()[0], 2)}


def numbers(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return [{k: v for k, v in row.items() if k != "wall_time_s"} for row in csv.DictReader(fh)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", type=Path)
    p.add_argument("--workers", type=int, default=2, help="the parallel run's workers (default 2)")
    p.add_argument("--out", type=Path, default=Path("runs/sweep-speedup"), help="where both sweeps run")
    p.add_argument("--results", type=Path, default=Path("bench/results/sweep-speedup"))
    args = p.parse_args(argv)
    serial = timed_sweep(args.sweep, args.out / "workers-1", 1)
    print(f"1 worker: {serial['wall_s']} s", file=sys.stderr)
    parallel = timed_sweep(args.sweep, args.out / f"workers-{args.workers}", args.workers)
    print(f"{args.workers} workers: {parallel['wall_s']} s", file=sys.stderr)
    one, many = (numbers(args.out / f"workers-{w}" / "sweep.csv") for w in (1, args.workers))
    result = {"sweep": str(args.sweep), "cells": len(one), "cpu_cores": os.cpu_count(),
              "runs": [serial, parallel], "wall_time_ratio": round(parallel["wall_s"] / serial["wall_s"], 3),
              "identical_numbers": one == many}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "speedup.json").write_text(json.dumps(result, indent=2) + "\n")
    for name in ("sweep.csv", "summary.csv", "sweep.png", "f1_curves.png"):
        shutil.copy(args.out / f"workers-{args.workers}" / name, args.results / name)
    print(json.dumps(result, indent=2))
    return 0 if result["identical_numbers"] else 1


if __name__ == "__main__":
    sys.exit(main())
