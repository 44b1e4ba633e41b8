"""Summarise the FedSub issue-14 runs: per configuration, final macro-F1 and bytes per device per
round (mean ± 95 % CI over seeds, t distribution) and FedSub's mechanism statistics; per pair the
text compares, a paired t-test with the seed as its unit, as a sweep's ``paired.csv``
(``p2pfed.sweeps.paired``): per shared seed, each run's mean final macro-F1 over the devices both
runs scored is one observation (devices of one run share fused models and recur across seeds, so
they are not independent samples); ``paired_test`` gives the mean difference, its 95 % t interval
over the seeds and the p-value, and ``adjust`` the p-values adjusted over all the comparisons the
table makes (Benjamini–Hochberg). A claim needs the adjusted p below 0.05. With the 2–3 seeds these
runs have, the intervals are wide and only large, consistent differences reach it; a pair sharing
one seed has no test.

Runs (each: the embedded quickstart, 30 rounds), from the worktree root:

    for s in 1 2 3; do
      p2pfed run --quiet --set rounds=30 --seed $s --set algorithm.k_rule=literal --out RUNS/klit-s$s
      p2pfed run --quiet --set rounds=30 --seed $s --out RUNS/kmin-s$s            # the defaults
      p2pfed run --quiet --set rounds=30 --seed $s --set algorithm.exchange=two-phase --out RUNS/twophase-s$s
      p2pfed run --quiet --set rounds=30 --seed $s --set algorithm.exchange=two-phase \
        --set engine.precision=float16 --out RUNS/tpf16-s$s
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

from p2pfed.sweeps.paired import adjust, paired_test, seed_means

STATS = ("k_mean", "literal_k_mean", "cluster_size_mean", "fusions_with_mate_fraction",
         "subnet_message_bytes", "subnet_message_bytes_paper_style")
PAIRS = [("kmin", "klit"), ("twophase", "gossip"), ("twophase", "kmin"), ("tpf16", "gossip"), ("tpf16", "kmin"),
         ("kmin", "lead"), ("kmin", "cavg"), ("cavg", "lead")]
ALPHA = 0.05


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
        with (summary.parent / "devices.csv").open(newline="") as f:
            devices = {int(r["device"]): float(r["f1_macro"]) for r in csv.DictReader(f)
                       if r["f1_macro"] not in ("", "nan")}
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
    rows = adjust([r for a, b in PAIRS if a in runs and b in runs and (r := compare(runs, a, b)) is not None])
    tested = [r for r in rows if r["p_value"] != ""]
    n = sorted({len(r["seeds"]) for r in rows}) or [0]
    print(f"Paired by seed (unit: seed; n = the shared seeds, {n[0]}–{n[-1]} per pair: few, so wide intervals; "
          f"each seed's value is the run's mean final macro-F1 over the devices both runs scored); 95 % t "
          f"interval over the seeds; p adjusted (Benjamini–Hochberg) over the {len(tested)} comparisons with "
          f"a test; bold: adjusted p < {ALPHA}. A pair sharing one seed has no test.")
    print()
    print("| A vs B | seeds | devices | F1 A | F1 B | F1 A−B [95 % CI over seeds] | p | p adjusted | bytes ratio A/B |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        diff = f"{r['f1_diff']:+.4f}"
        if r["p_value"] == "":
            cell, p, p_adj = f"{diff} (one seed: no test)", "–", "–"
        else:
            if r["p_adjusted"] < ALPHA:
                diff = f"**{diff}**"
            cell = f"{diff} [{r['f1_diff_ci_low']:+.4f}, {r['f1_diff_ci_high']:+.4f}]"
            p, p_adj = f"{r['p_value']:.3g}", f"{r['p_adjusted']:.3g}"
        print(f"| {r['a']} vs {r['b']} | {r['seeds']} | {r['devices']} | {r['f1_a']:.4f} | {r['f1_b']:.4f} | "
              f"{cell} | {p} | {p_adj} | {r['bytes_ratio']:.3f} |")


def compare(runs: dict[str, dict[int, dict]], a: str, b: str) -> dict | None:
    """A vs B over their shared seeds: per seed, both runs' mean F1 over the devices both scored
    (one observation per seed), then ``paired_test`` over those means; None when no seed pairs."""
    xa, xb, seeds, devices, ratios = [], [], [], [], []
    for s in sorted(set(runs[a]) & set(runs[b])):
        means = seed_means(runs[a][s]["devices"], runs[b][s]["devices"])
        if means is None:
            continue
        xa.append(means[0])
        xb.append(means[1])
        seeds.append(s)
        devices.append(means[2])
        ratios.append(runs[a][s]["summary"]["comm"]["bytes_per_device_per_round"]
                      / max(runs[b][s]["summary"]["comm"]["bytes_per_device_per_round"], 1e-12))
    if not seeds:
        return None
    return {"a": a, "b": b, "seeds": seeds, "devices": min(devices), **paired_test(xa, xb),
            "bytes_ratio": float(np.mean(ratios))}


if __name__ == "__main__":
    main(Path(sys.argv[1]))
