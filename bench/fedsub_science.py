"""Summarise the FedSub issue-14 runs: per configuration, final macro-F1 and bytes per device per
round (mean ± 95 % CI over seeds, t distribution) and FedSub's mechanism statistics; per pair the
text compares, a paired t-test over devices × seeds (scipy).

Runs (each: the embedded quickstart, 30 rounds), from the worktree root:

    for s in 1 2 3; do
      p2pfed run --quiet --set rounds=30 --seed $s --set algorithm.k_rule=literal --out RUNS/klit-s$s
      p2pfed run --quiet --set rounds=30 --seed $s --out RUNS/kmin-s$s            # the defaults
      p2pfed run --quiet --set rounds=30 --seed $s --set algorithm.exchange=two-phase --out RUNS/twophase-s$s
      p2pfed run --quiet --set rounds=30 --seed $s --set algorithm.exchange=two-phase \
        --set algorithm.float16=true --out RUNS/tpf16-s$s
      p2pfed run --quiet --set rounds=30 --seed $s --algorithm gossip-avg --out RUNS/gossip-s$s
      p2pfed run --quiet --set rounds=30 --seed $s --set algorithm.fusion=leadership --out RUNS/lead-s$s
      p2pfed run --quiet --set rounds=30 --seed $s --set algorithm.fusion=cluster-avg --out RUNS/cavg-s$s
    done
    python bench/fedsub_science.py RUNS
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

STATS = ("k_mean", "literal_k_mean", "cluster_size_mean", "fusions_with_mate_fraction",
         "subnet_message_bytes", "subnet_message_bytes_paper_style")
PAIRS = [("kmin", "klit"), ("twophase", "gossip"), ("twophase", "kmin"), ("tpf16", "gossip"), ("tpf16", "kmin"),
         ("kmin", "lead"), ("kmin", "cavg"), ("cavg", "lead")]


def ci(values: list[float]) -> str:
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return f"{v.mean():.4f}"
    half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return f"{v.mean():.4f} ± {half:.4f}"


def load(root: Path) -> dict[str, dict[int, dict]]:
    runs: dict[str, dict[int, dict]] = {}
    for summary in sorted(root.glob("*-s*/summary.json")):
        name, seed = summary.parent.name.rsplit("-s", 1)
        devices = {int(r["device"]): float(r["f1_macro"])
                   for r in csv.DictReader((summary.parent / "devices.csv").open())}
        runs.setdefault(name, {})[int(seed)] = {"summary": json.loads(summary.read_text()), "devices": devices}
    return runs


def main(root: Path) -> None:
    runs = load(root)
    print("| run | seeds | final F1 (mean ± 95% CI over seeds) | bytes/device/round | "
          + " | ".join(STATS) + " |")
    print("|---" * (4 + len(STATS)) + "|")
    for name, by_seed in runs.items():
        sums = [r["summary"] for r in by_seed.values()]
        f1 = [s["final"]["f1_macro_mean"] for s in sums]
        bpr = [s["comm"]["bytes_per_device_per_round"] for s in sums]
        st = [ci([s["algorithm_stats"][k] for s in sums]) if k in sums[0]["algorithm_stats"] else "-" for k in STATS]
        print(f"| {name} | {sorted(by_seed)} | {ci(f1)} | {ci(bpr)} | " + " | ".join(st) + " |")
    print()
    print("| A vs B | seeds | mean F1 difference A−B over devices × seeds | paired t p | bytes ratio A/B |")
    print("|---|---|---|---|---|")
    for a, b in PAIRS:
        if a not in runs or b not in runs:
            continue
        seeds = sorted(set(runs[a]) & set(runs[b]))
        diff = [runs[a][s]["devices"][d] - runs[b][s]["devices"][d] for s in seeds for d in runs[a][s]["devices"]]
        t = stats.ttest_1samp(diff, 0.0)
        half = stats.t.ppf(0.975, len(diff) - 1) * np.std(diff, ddof=1) / np.sqrt(len(diff))
        ratio = np.mean([runs[a][s]["summary"]["comm"]["bytes_per_device_per_round"]
                         / max(runs[b][s]["summary"]["comm"]["bytes_per_device_per_round"], 1e-12) for s in seeds])
        print(f"| {a} vs {b} | {seeds} | {np.mean(diff):+.4f} ± {half:.4f} | {t.pvalue:.3g} | {ratio:.3f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
