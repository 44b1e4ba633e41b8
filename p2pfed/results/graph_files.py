"""A run's graph as data, for the HTML report: ``edges.csv`` (a fixed topology) or ``contacts.csv``
(every contact of an opportunistic run, so the contact graph can be redrawn at any moment).

    edges.csv     a, b                   one row per link of the topology
    contacts.csv  a, b, start_s, end_s   one row per contact, by start time: a and b can exchange
                                         bytes during [start_s, end_s) of simulated time
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from p2pfed.results.files import write_csv

EDGE_COLUMNS = ["a", "b"]
CONTACT_COLUMNS = ["a", "b", "start_s", "end_s"]


def write_edges(out_dir: Path, graph: Any) -> None:
    """``edges.csv``: the links of a networkx graph of device indices."""
    rows = [{"a": min(a, b), "b": max(a, b)} for a, b in graph.edges()]
    write_csv(Path(out_dir) / "edges.csv", EDGE_COLUMNS, sorted(rows, key=lambda r: (r["a"], r["b"])))


def write_contacts(out_dir: Path, plan: Any) -> None:
    """``contacts.csv``: every contact of a ``ContactPlan``, in its (start time) order."""
    rows = [{"a": c.a, "b": c.b, "start_s": c.start, "end_s": c.end} for c in plan.contacts]
    write_csv(Path(out_dir) / "contacts.csv", CONTACT_COLUMNS, rows)
