"""paired.csv: every two configurations of a sweep compared seed by seed.

Two configurations (method × swept values) that ran with the same seed saw the same data split
and the same devices, so they pair up by seed. The unit of the test is the seed — a whole run:
the devices of one run share fused models and a device recurs across seeds, so devices are not
independent samples (pooling them is pseudo-replication and inflates significance). For each
shared seed the run's mean final macro-F1 over the devices both runs scored (``devices.csv``) is
one observation; the paired t-test (``scipy.stats.ttest_rel``) runs over those n seeds, with the
95 % t interval of the mean difference. A sweep compares many pairs at once, so each p-value is
also given adjusted for the number of comparisons in the file by the Benjamini–Hochberg
procedure (``scipy.stats.false_discovery_control``): a claim needs ``p_adjusted`` < 0.05. The
bytes ratio is the mean over the shared seeds of A's bytes per device per round over B's.

The round runtimes score every device after its fusion and after its training, and the two can
rank methods differently: the rows of the run's headline protocol (``evaluation.when``; over
contacts ``at-instant``) come first, then, where the runs scored it, the same comparisons under
the other protocol (``protocol`` column). Each protocol's rows are adjusted among themselves: they
are the same questions asked of a different model, not more questions.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from p2pfed.results.files import read_csv
from p2pfed.results.recorder import PROTOCOLS
from p2pfed.sweeps.aggregate import CONFIDENCE, CellResult, value_text

UNIT = "seed"
ADJUSTMENT = "benjamini-hochberg"
COLUMNS = ["a", "b", "protocol", "unit", "n", "devices", "f1_a", "f1_b", "f1_diff", "f1_diff_ci_low", "f1_diff_ci_high",
           "p_value", "p_adjusted", "adjustment", "comparisons", "bytes_ratio"]


def label(r: CellResult) -> str:
    """A configuration's name: the method (as its summary.json names it) and the swept values it
    has, e.g. ``fedsub algorithm.fusion=overlap``; a key the method lacks (it ran without it: its
    resolved options in summary.json do not hold it) is left out, so its points are one
    configuration."""
    summary = r.summary or {}
    shown = summary.get("algorithm") or r.point.method   # a user's class by its own name
    options = summary.get("config", {}).get("algorithm", {})
    return " ".join([shown, *(f"{k}={value_text(v)}" for k, v in r.point.values
                              if not k.startswith("algorithm.") or k.split(".")[1] in options)])


def per_device_f1(r: CellResult, column: str = "f1_macro") -> dict[int, float]:
    """device -> its final F1 in ``devices.csv`` (``column``: the headline, or one protocol's)."""
    return {int(row["device"]): float(row[column]) for row in r.rows("devices.csv")
            if row.get(column) not in (None, "", "nan")}


def headline_protocol(r: CellResult) -> str:
    """Which model a run's headline F1 scored (summary.json ``evaluation.protocol``; runs made
    before it was recorded: their scenario's ``evaluation.when``, or ``at-instant`` over contacts)."""
    summary = r.summary or {}
    if "evaluation" in summary:
        return str(summary["evaluation"]["protocol"])
    config = summary.get("config", {})
    if config.get("contacts", {}).get("kind", "none") != "none":
        return "at-instant"
    return str(config.get("evaluation", {}).get("when", "after-fusion"))


def seed_means(fa: dict[int, float], fb: dict[int, float]) -> tuple[float, float, int] | None:
    """Two runs' mean F1 over the devices both scored (device -> F1), and how many; None when
    they share none: one seed's observation of the paired test."""
    shared = sorted(set(fa) & set(fb))
    if not shared:
        return None
    return float(np.mean([fa[d] for d in shared])), float(np.mean([fb[d] for d in shared])), len(shared)


def paired_rows(results: list[CellResult]) -> list[dict[str, Any]]:
    """One row per pair of configurations with at least two shared seeds, in grid order, with
    p-values adjusted over every row that has one — for the headline F1, then for each other
    protocol the runs scored."""
    configs: dict[str, dict[int, CellResult]] = {}
    for r in results:
        if r.summary is not None:
            configs.setdefault(label(r), {})[r.point.seed] = r
    headline = {headline_protocol(r) for runs in configs.values() for r in runs.values()}
    rows = adjust(_rows(configs, "f1_macro", " / ".join(sorted(headline))))
    for protocol in PROTOCOLS:
        if headline != {protocol}:
            column = f"f1_{protocol.replace('-', '_')}"
            rows += adjust(_rows(configs, column, protocol))
    return rows


def _rows(configs: dict[str, dict[int, CellResult]], column: str, protocol: str) -> list[dict[str, Any]]:
    # each run's devices.csv read once: the pairs below are quadratic in the configurations
    f1 = {name: {seed: per_device_f1(r, column) for seed, r in runs.items()} for name, runs in configs.items()}
    rows = []
    for (a, runs_a), (b, runs_b) in itertools.combinations(configs.items(), 2):
        pairs = [(s, m) for s in sorted(set(runs_a) & set(runs_b))
                 if (m := seed_means(f1[a][s], f1[b][s])) is not None]
        if len(pairs) < 2:
            continue
        ratios = []
        for s, _ in pairs:
            summary_a, summary_b = runs_a[s].summary, runs_b[s].summary
            assert summary_a is not None and summary_b is not None   # configs hold finished cells
            bytes_b = summary_b["comm"]["bytes_per_device_per_round"]
            if bytes_b:
                ratios.append(summary_a["comm"]["bytes_per_device_per_round"] / bytes_b)
        xa, xb, devices = ([m[i] for _, m in pairs] for i in range(3))
        rows.append({"a": a, "b": b, "protocol": protocol, "unit": UNIT, "n": len(pairs), "devices": min(devices),
                     **paired_test(xa, xb),
                     "bytes_ratio": round(float(np.mean(ratios)), 4) if ratios else ""})
    return rows


def paired_test(xa: list[float], xb: list[float]) -> dict[str, Any]:
    """Means, mean difference a − b with its t interval, and the paired t-test's p-value, over
    paired observations (one per seed)."""
    a, b = np.asarray(xa), np.asarray(xb)
    diff = a - b
    out: dict[str, Any] = {"f1_a": round(float(a.mean()), 6), "f1_b": round(float(b.mean()), 6),
                           "f1_diff": round(float(diff.mean()), 6)}
    sd = float(diff.std(ddof=1)) if diff.size > 1 else math.nan
    if diff.size < 2 or sd == 0.0 or math.isnan(sd):
        return {**out, "f1_diff_ci_low": "", "f1_diff_ci_high": "", "p_value": ""}
    low, high = stats.t.interval(CONFIDENCE, diff.size - 1, loc=diff.mean(), scale=sd / math.sqrt(diff.size))
    return {**out, "f1_diff_ci_low": round(float(low), 6), "f1_diff_ci_high": round(float(high), 6),
            "p_value": float(stats.ttest_rel(a, b).pvalue)}


def adjust(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's p-value adjusted for the number of tests among ``rows`` (Benjamini–Hochberg),
    both then given to three significant digits."""
    tested = [r for r in rows if r["p_value"] != ""]
    adjusted = stats.false_discovery_control([r["p_value"] for r in tested], method="bh") if tested else []
    for r, p in zip(tested, adjusted):
        r.update(p_value=_digits(r["p_value"]), p_adjusted=_digits(p), adjustment=ADJUSTMENT,
                 comparisons=len(tested))
    for r in rows:
        if r["p_value"] == "":
            r.update(p_adjusted="", adjustment="", comparisons=len(tested))
    return rows


def read_paired(path: Path, protocol: str | None = None) -> list[dict[str, str]]:
    """The rows of a ``paired.csv`` under one protocol: ``None`` for the headline (the file's
    first rows; a file written before protocols were recorded holds only those)."""
    rows = read_csv(path)
    if not rows or "protocol" not in rows[0]:
        return rows if protocol is None else []
    wanted = rows[0]["protocol"] if protocol is None else protocol
    return [r for r in rows if r["protocol"] == wanted]


def _digits(p: float) -> float:
    return float(f"{p:.3g}")
