"""``report.html``: one self-contained page of a run or a sweep, to open from disk, offline.

The page is ``report_page.html`` with the data inlined as JSON and ``report_page.js`` (small
vanilla-JS SVG plots, sortable tables and the graph with its time slider) inlined too: no CDN,
nothing fetched. ``run_page_data`` reads a run folder's files; a sweep's data comes from
``p2pfed.sweeps.report``. Both go through ``write_page``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from p2pfed.atomic import write_text_atomically
from p2pfed.results.files import finite_or_null

PAGE = "report.html"
WINDOWS = 40            # time windows of the contact graph the slider steps through


def number(text: str) -> Any:
    """A CSV cell as a number where it is one (NaN as None), else the text."""
    try:
        value = float(text)
    except ValueError:
        return text
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value


def read_table(path: Path) -> list[dict[str, Any]]:
    """A CSV file's rows with numbers as numbers; [] where the file is missing."""
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return [{k: number(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def write_page(folder: Path, title: str, data: dict[str, Any]) -> Path:
    """``folder/report.html``: the template with ``data`` and the script inlined."""
    here = Path(__file__).parent
    payload = json.dumps(finite_or_null(data), allow_nan=False).replace("</", "<\\/")
    html = (here / "report_page.html").read_text()
    for key, value in {"TITLE": _escape(title), "DATA": payload,
                       "SCRIPT": (here / "report_page.js").read_text()}.items():
        html = html.replace(f"/*{key}*/", value)
    path = Path(folder) / PAGE
    write_text_atomically(path, html)
    return path


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def run_page_data(folder: Path) -> dict[str, Any]:
    """What the run page shows, from the files of run folder ``folder``."""
    folder = Path(folder)
    summary = json.loads((folder / "summary.json").read_text())
    rounds, devices = read_table(folder / "rounds.csv"), read_table(folder / "devices.csv")
    roles = (summary.get("adversaries") or {}).get("devices", {})
    for d in devices:
        d["role"] = roles.get(str(d.get("device")), "honest")
    contacts = (summary.get("config", {}).get("contacts", {}) or {}).get("kind", "none") not in (None, "none")
    return {"kind": "run", "title": f"{summary.get('scenario', '')} — {summary.get('algorithm', '')}",
            "x": "sim_time_s" if contacts else "round", "rounds": rounds, "devices": devices,
            "graph": _graph(folder, len(devices), float(summary.get("sim_time_s") or 0.0)),
            "facts": _facts(summary)}


def _graph(folder: Path, n: int, sim_time: float) -> dict[str, Any] | None:
    """The topology (``edges.csv``), or the contact graph of each of ``WINDOWS`` equal windows of the
    run's time (``contacts.csv``): an edge for each pair in contact at some moment of the window."""
    edges = read_table(folder / "edges.csv")
    if edges:
        return {"n": n, "times": [None], "edges": [[[e["a"], e["b"]] for e in edges]]}
    if not (folder / "contacts.csv").is_file():
        return None
    table = np.loadtxt(folder / "contacts.csv", delimiter=",", skiprows=1, ndmin=2).reshape(-1, 4)
    a, b, start, end = table.T
    times = [[sim_time * i / WINDOWS, sim_time * (i + 1) / WINDOWS] for i in range(WINDOWS)]
    live = [np.flatnonzero((start < t1) & (end > t0)) for t0, t1 in times]
    return {"n": n, "times": times,
            "edges": [sorted({(int(a[k]), int(b[k])) for k in ks}) for ks in live]}


def _facts(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary's headline numbers, its energy account and its adversaries, flattened one level."""
    facts: dict[str, Any] = {k: summary[k] for k in ("scenario", "algorithm", "devices", "rounds", "sim_time_s")
                             if k in summary}
    facts.update({f"final.{k}": v for k, v in (summary.get("final") or {}).items() if not isinstance(v, dict)})
    for part in ("energy", "adversaries"):
        facts.update({f"{part}.{k}": v for k, v in (summary.get(part) or {}).items() if not isinstance(v, dict)})
    return facts
