"""``p2pfed report DIR``: sweep.csv, summary.csv, paired.csv and the plots, rebuilt from the cell folders.

The sweep command ends by calling the same function, so a report made later (after a
``--resume``, or on another machine from a copied folder) is the same as the one made at the end.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from p2pfed.results.compare import format_table
from p2pfed.results.files import write_csv
from p2pfed.results.provenance import describe
from p2pfed.results.report_page import read_table, write_page
from p2pfed.sweeps import store
from p2pfed.sweeps.aggregate import (collect, curves, models_energy, summary_columns, summary_rows,
                                    sweep_columns, sweep_rows)
from p2pfed.sweeps.paired import COLUMNS as PAIRED_COLUMNS
from p2pfed.sweeps.paired import paired_rows
from p2pfed.sweeps.spec import SweepError

FILES = "sweep.csv, summary.csv, paired.csv, sweep.png, f1_curves.png, report.html"


def build_report(out: Path) -> str:
    """Write the sweep's tables and plots into ``out``; return the summary as a printable table."""
    from p2pfed.sweeps.plots import plot_curves, plot_sweep   # matplotlib only when plots are drawn

    if not store.has_manifest(out):
        raise SweepError([f"{out}: neither a sweep folder (no {store.MANIFEST}; `p2pfed sweep` writes one)"
                          f" nor a run folder (no summary.json)"])
    name, keys, points = store.read_manifest(out)
    results = collect(out, points)
    energy = models_energy(results)
    write_csv(out / "sweep.csv", sweep_columns(keys, energy), sweep_rows(results))
    rows = summary_rows(results, keys)
    write_csv(out / "summary.csv", summary_columns(keys, energy), rows)
    write_csv(out / "paired.csv", PAIRED_COLUMNS, paired_rows(results))
    plot_sweep(rows, keys, out / "sweep.png", title=name)
    x, panels = curves(results)
    plot_curves(x, panels, out / "f1_curves.png", title=f"{name}: F1 over {'rounds' if x == 'round' else 'time'}")
    write_page(out, f"sweep {name}", {"kind": "sweep", "x": x, "panels": page_panels(panels),
                                      "summary": read_table(out / "summary.csv"),
                                      "paired": read_table(out / "paired.csv")})
    table = format_table([_printed(r, keys) for r in rows],
                         ["method", *keys, "n", "failed", "f1", "f1 95% CI", "bytes/dev/round"])
    return table + code_note(results)


def page_panels(panels: dict[tuple, dict[str, list]]) -> list[dict]:
    """The F1 curves for report.html: per panel, per method, the mean over seeds with a ± std band
    (over the rounds every seed reached)."""
    out = []
    for label, methods in panels.items():
        series = []
        for method, runs in methods.items():
            length = min(len(run) for run in runs)
            f1 = np.array([[f for _, f in run[:length]] for run in runs])
            mean, std = f1.mean(axis=0), f1.std(axis=0)
            series.append({"name": method, "x": [x for x, _ in runs[0][:length]], "y": mean.tolist(),
                           "lo": (mean - std).tolist(), "hi": (mean + std).tolist()})
        out.append({"title": ", ".join(f"{k}={v}" for k, v in label) or "all cells", "series": series})
    return out


def code_note(results: list) -> str:
    """A warning line when the finished cells came from more than one version of the code (a
    resumed sweep after a change): their differences then mix code and configuration."""
    versions: dict[str, int] = {}
    for r in results:
        if r.summary is not None:
            label = describe(r.summary.get("code"))
            versions[label] = versions.get(label, 0) + 1
    if len(versions) <= 1:
        return ""
    listed = "; ".join(f"{label}: {n} cells" for label, n in sorted(versions.items()))
    return f"\nwarning: the cells ran with {len(versions)} versions of the code ({listed})"


def _printed(row: dict, keys: list[str]) -> dict:
    ci = "" if row["f1_ci_low"] == "" else f"[{row['f1_ci_low']:.4f}, {row['f1_ci_high']:.4f}]"
    mean = row["f1_mean"]
    size = row["bytes_per_device_per_round_mean"]
    return {"method": row["method"], **{k: row[k] for k in keys}, "n": row["n"], "failed": row["failed"],
            "f1": mean if mean == "" else float(mean), "f1 95% CI": ci,
            "bytes/dev/round": size if size == "" else f"{size:.0f}"}
