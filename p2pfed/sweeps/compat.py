"""Sweep folders an older p2pfed wrote, whose cells are keyed by that version's identity.

``--resume`` finds such a cell by its point (method, seed, swept values) in the folder's
manifest and keeps it as the point's cell when the scenario it ran (its ``summary.json``
``config``) has the canonical form of the scenario the point runs now; the cell's folder is then
renamed to the one its identity names now. The contents of the files a scenario names are not
compared for these cells (an older folder does not record them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from p2pfed.scenario.canonical import canonical
from p2pfed.scenario.loader import dump
from p2pfed.sweeps import store
from p2pfed.sweeps.cells import CellSpec, Point, resolve


def adopt_older_cells(out: Path, points: list[Point]) -> tuple[int, int]:
    """Keep the finished cells of the older manifest in ``out`` that run the same scenarios as
    ``points`` under another identity; returns how many were kept and how many ran another
    scenario (a field since removed or changed) and run again."""
    if not store.has_manifest(out):
        return 0, 0
    _, _, older = store.read_manifest(out)
    by_point = {_key(p): p.cell for p in older}
    kept = other = 0
    for point in points:
        old = by_point.get(_key(point))
        if old is None or old.id == point.cell.id or store.is_done(out, point.cell) or not store.is_done(out, old):
            continue
        if _same_scenario(out, old, point.cell):
            os.replace(store.cell_dir(out, old), store.cell_dir(out, point.cell))
            kept += 1
        else:
            other += 1
    return kept, other


def _key(point: Point) -> str:
    return json.dumps([point.method, point.seed, [list(kv) for kv in point.values]], default=str)


def _same_scenario(out: Path, old: CellSpec, new: CellSpec) -> bool:
    """Whether the older cell's ``summary.json`` ``config`` is the scenario ``new`` runs, both
    in canonical form."""
    config = json.loads((store.cell_dir(out, old) / "summary.json").read_text()).get("config")
    if not isinstance(config, dict):
        return False
    loaded = resolve(new.scenario, new.method, new.seed, new.overrides)
    return canonical(config, loaded.method) == canonical(dump(loaded), loaded.method)
