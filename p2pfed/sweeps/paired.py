"""paired.csv: every two configurations of a sweep compared on the same devices and seeds.

Two configurations (method × swept values) that ran with the same seeds saw the same data split
and the same devices, so their final per-device macro-F1 (``devices.csv``) pair up by (seed,
device). The difference is tested with a paired t-test (``scipy.stats.ttest_rel``) over those
pairs, with its 95 % t interval, which is what a claim "A beats B" needs and a comparison of two
means over seeds cannot give. The bytes ratio is the mean over the shared seeds of A's bytes per
device per round over B's.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from scipy import stats

from p2pfed.results.files import read_csv
from p2pfed.sweeps.aggregate import CONFIDENCE, CellResult, value_text
from p2pfed.sweeps.cells import knows

COLUMNS = ["a", "b", "seeds", "pairs", "f1_a", "f1_b", "f1_diff", "f1_diff_ci_low", "f1_diff_ci_high",
           "p_value", "bytes_ratio"]


def label(r: CellResult) -> str:
    """A configuration's name: the method and the swept values it has, e.g. ``fedsub
    algorithm.fusion=overlap``; a key the method lacks (it ran without it) is left out, so its
    points are one configuration."""
    method = r.point.method
    return " ".join([method, *(f"{k}={value_text(v)}" for k, v in r.point.values if knows(method, k))])


def per_device_f1(r: CellResult) -> dict[int, float]:
    assert r.folder is not None   # a finished cell has its folder
    return {int(row["device"]): float(row["f1_macro"]) for row in read_csv(r.folder / "devices.csv")
            if row["f1_macro"] not in ("", "nan")}


def paired_rows(results: list[CellResult]) -> list[dict[str, Any]]:
    """One row per pair of configurations with at least two shared seeds, in grid order."""
    configs: dict[str, dict[int, CellResult]] = {}
    for r in results:
        if r.summary is not None:
            configs.setdefault(label(r), {})[r.point.seed] = r
    rows = []
    for (a, runs_a), (b, runs_b) in itertools.combinations(configs.items(), 2):
        seeds = sorted(set(runs_a) & set(runs_b))
        if len(seeds) < 2:
            continue
        xa, xb, ratios = [], [], []
        for s in seeds:
            fa, fb = per_device_f1(runs_a[s]), per_device_f1(runs_b[s])
            shared = sorted(set(fa) & set(fb))
            xa += [fa[d] for d in shared]
            xb += [fb[d] for d in shared]
            summary_a, summary_b = runs_a[s].summary, runs_b[s].summary
            assert summary_a is not None and summary_b is not None   # configs hold finished cells
            bytes_b = summary_b["comm"]["bytes_per_device_per_round"]
            if bytes_b:
                ratios.append(summary_a["comm"]["bytes_per_device_per_round"] / bytes_b)
        rows.append({"a": a, "b": b, "seeds": len(seeds), "pairs": len(xa), **paired_test(xa, xb),
                     "bytes_ratio": round(float(np.mean(ratios)), 4) if ratios else ""})
    return rows


def paired_test(xa: list[float], xb: list[float]) -> dict[str, Any]:
    """Means, mean difference a − b with its t interval, and the paired t-test's p-value."""
    a, b = np.asarray(xa), np.asarray(xb)
    diff = a - b
    out: dict[str, Any] = {"f1_a": round(float(a.mean()), 6), "f1_b": round(float(b.mean()), 6),
                           "f1_diff": round(float(diff.mean()), 6)}
    sd = float(diff.std(ddof=1)) if diff.size > 1 else math.nan
    if diff.size < 2 or sd == 0.0 or math.isnan(sd):
        return {**out, "f1_diff_ci_low": "", "f1_diff_ci_high": "", "p_value": ""}
    low, high = stats.t.interval(CONFIDENCE, diff.size - 1, loc=diff.mean(), scale=sd / math.sqrt(diff.size))
    return {**out, "f1_diff_ci_low": round(float(low), 6), "f1_diff_ci_high": round(float(high), 6),
            "p_value": float(f"{stats.ttest_rel(a, b).pvalue:.3g}")}
