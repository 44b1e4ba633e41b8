"""From finished cells (their folders, or the sweep's archive) to tables: sweep.csv (one row per
point) and summary.csv (per method × swept values: mean, standard deviation and 95 % confidence
interval over seeds).

The interval is Student's t interval of the mean (``scipy.stats.t.interval``) with n - 1 degrees
of freedom; with one seed there is no spread to estimate, so std and interval stay empty.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy import stats

from p2pfed.algorithms.registry import method_label
from p2pfed.sweeps import store
from p2pfed.sweeps.archive import StoredCell, stored_cells
from p2pfed.sweeps.cells import Point

# sweep.csv metrics: column -> where it sits in summary.json
CELL_METRICS = {
    "f1_macro_mean": ("final", "f1_macro_mean"),
    "f1_macro_std": ("final", "f1_macro_std"),
    "generalization_f1_mean": ("final", "generalization_f1_mean"),   # with evaluation.generalization
    "loss_mean": ("final", "loss_mean"),
    "accuracy_mean": ("final", "accuracy_mean"),
    "f1_present_mean": ("final", "f1_present_mean"),                 # macro-F1 over the test set's classes
    "f1_after_fusion_mean": ("final", "f1_after_fusion_mean"),       # both protocols (round runtimes)
    "f1_after_training_mean": ("final", "f1_after_training_mean"),
    "bytes_per_device_per_round": ("comm", "bytes_per_device_per_round"),
    "bytes_sent_total": ("comm", "bytes_sent_total"),
    "messages_sent": ("comm", "messages_sent"),
    "messages_dropped": ("comm", "messages_dropped"),
    "transfers_started": ("comm", "transfers_started"),
    "transfers_completed": ("comm", "transfers_completed"),
    "transfers_aborted": ("comm", "transfers_aborted"),
    "bytes_wasted": ("comm", "bytes_wasted"),
    "delivery_ratio": ("comm", "delivery_ratio"),
    "contacts_per_device_per_hour": ("contacts", "contacts_per_device_per_hour"),
    "mean_fused_age_s": ("asynchronous", "mean_fused_age_s"),
    "rounds": ("rounds",),
    "sim_time_s": ("sim_time_s",),
    "wall_time_s": ("wall_time_s",),
}
# sweep.csv columns of runs that model energy (a scenario's ``devices`` section), only in sweeps
# that have any: every other sweep's tables keep their columns
ENERGY_METRICS = {
    "joules_per_device": ("energy", "total_j_per_device"),
    "comm_joules_per_device": ("energy", "comm_j_per_device"),
    "compute_joules_per_device": ("energy", "compute_j_per_device"),
}
# summary.csv: short name -> sweep.csv column, each given as mean, std, ci_low, ci_high
SUMMARY_METRICS = {"f1": "f1_macro_mean", "f1_after_fusion": "f1_after_fusion_mean",
                   "f1_after_training": "f1_after_training_mean", "f1_present": "f1_present_mean",
                   "generalization_f1": "generalization_f1_mean", "loss": "loss_mean",
                   "bytes_per_device_per_round": "bytes_per_device_per_round",
                   "transfers_aborted": "transfers_aborted", "delivery_ratio": "delivery_ratio"}
CONFIDENCE = 0.95


@dataclass
class CellResult:
    """One point of the grid with its outcome: the summary.json of a finished cell, or its error."""

    point: Point
    status: str                      # done | failed | missing
    error: str = ""
    summary: dict[str, Any] | None = None
    folder: Path | None = None       # a finished cell's folder (in the archive form: where it would be)
    stored: StoredCell | None = None

    def rows(self, file: str) -> list[dict[str, str]]:
        """A finished cell's ``rounds.csv`` or ``devices.csv`` rows, from its folder or the archive."""
        assert self.stored is not None   # only finished cells are read
        return self.stored.rows(file)


def collect(out: Path, points: list[Point]) -> list[CellResult]:
    results = []
    stored = stored_cells(out)
    for p in points:
        if (cell := stored.get(p.cell.folder)) is not None:
            results.append(CellResult(p, "done", summary=cell.summary, folder=store.cell_dir(out, p.cell),
                                      stored=cell))
        elif (error := store.failure(out, p.cell)) is not None:
            results.append(CellResult(p, "failed", error=error))
        else:
            results.append(CellResult(p, "missing"))
    return results


def value_text(value: Any) -> str:
    """A swept value as the sweep file writes it (YAML flow style)."""
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True, width=math.inf).removesuffix("\n").removesuffix("\n...")


def models_energy(results: list[CellResult]) -> bool:
    """Whether any finished cell has an energy account (then the tables show joules)."""
    return any(r.summary is not None and "energy" in r.summary for r in results)


def sweep_columns(keys: list[str], energy: bool = False) -> list[str]:
    return ["method", *keys, "seed", "cell", "status", "error", *CELL_METRICS, *(ENERGY_METRICS if energy else ())]


def method_labels(results: list[CellResult]) -> dict[str, str]:
    """Each method of the grid as the tables show it: the name its finished cells' summary.json
    gives it (a user's class by its own ``name``, its file in the summary's ``code``), else the
    sweep's name for it."""
    labels = {r.point.method: r.summary.get("algorithm", r.point.method)
              for r in reversed(results) if r.summary is not None}
    return {r.point.method: labels.get(r.point.method) or method_label(r.point.method) for r in results}


def sweep_rows(results: list[CellResult]) -> list[dict[str, Any]]:
    rows = []
    labels = method_labels(results)
    for r in results:
        row = {"method": labels[r.point.method], **{k: value_text(v) for k, v in r.point.values},
               "seed": r.point.seed, "cell": r.point.cell.folder, "status": r.status, "error": r.error}
        if r.summary is not None:
            row.update({col: _dig(r.summary, path) for col, path in (CELL_METRICS | ENERGY_METRICS).items()})
        rows.append(row)
    return rows


def _dig(data: dict[str, Any] | None, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def mean_ci(values: Iterable[float], confidence: float = CONFIDENCE) -> tuple[float, float, float, float]:
    """(mean, sample std, CI low, CI high); NaN where one value cannot give them."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    if x.size == 0:
        return (math.nan,) * 4
    mean = float(x.mean())
    if x.size == 1:
        return mean, math.nan, math.nan, math.nan
    std = float(x.std(ddof=1))
    if std == 0.0:
        return mean, 0.0, mean, mean
    low, high = stats.t.interval(confidence, x.size - 1, loc=mean, scale=std / math.sqrt(x.size))
    return mean, std, float(low), float(high)


def summary_columns(keys: list[str], energy: bool = False) -> list[str]:
    metrics = [*SUMMARY_METRICS, *(["joules_per_device"] if energy else [])]
    stats_ = ("mean", "std", "ci_low", "ci_high")
    return ["method", *keys, "n", "failed", *(f"{m}_{s}" for m in metrics for s in stats_)]


def summary_rows(results: list[CellResult], keys: list[str]) -> list[dict[str, Any]]:
    """One row per method × swept values (in the grid's order), over its seeds."""
    groups: dict[tuple, list[CellResult]] = {}
    for r in results:
        groups.setdefault((r.point.method, *(value_text(v) for _, v in r.point.values)), []).append(r)
    rows = []
    labels = method_labels(results)
    for (method, *values), members in groups.items():
        done = [r for r in members if r.summary is not None]
        row: dict[str, Any] = {"method": labels[method], **dict(zip(keys, values)), "n": len(done),
                               "failed": sum(r.status == "failed" for r in members)}
        paths = {name: CELL_METRICS[column] for name, column in SUMMARY_METRICS.items()}
        for name, path in (paths | {"joules_per_device": ENERGY_METRICS["joules_per_device"]}).items():
            numbers = mean_ci(_dig(r.summary, path) for r in done)
            row.update({f"{name}_{s}": _round(v) for s, v in zip(("mean", "std", "ci_low", "ci_high"), numbers)})
        rows.append(row)
    return rows


def _round(x: float) -> float | str:
    return "" if math.isnan(x) else round(x, 6)


def curves(results: list[CellResult]) -> tuple[str, dict[tuple, dict[str, list[list[tuple[float, float]]]]]]:
    """F1 over rounds (or simulated time, when any cell runs on contacts), per seed.

    Returns (x column, {((key, value text), ...): {method: [[(x, f1), ...] per seed]}}).
    """
    done = [r for r in results if r.summary is not None]
    synchronous = all(_dig(r.summary, ("config", "contacts", "kind")) in (None, "none") for r in done)
    x = "round" if synchronous else "sim_time_s"
    labels = method_labels(results)
    panels: dict[tuple, dict[str, list]] = {}
    for r in done:
        rows = r.rows("rounds.csv")
        series = [(float(row[x]), float(row["f1_macro_mean"])) for row in rows]
        label = tuple((k, value_text(v)) for k, v in r.point.values)
        panels.setdefault(label, {}).setdefault(labels[r.point.method], []).append(series)
    return x, panels
