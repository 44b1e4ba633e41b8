"""The sweep's output folder: its manifest, one folder per cell, failures, and atomic completion.

    OUT/sweep.json              the grid: every point with its cell (what ``report`` rebuilds from)
    OUT/cells/<method>-<hash>/  one finished run, exactly the files ``p2pfed run`` writes
    OUT/failed/<method>-<hash>.txt   a failed cell: its error on the first line, then the traceback

A cell is run into ``OUT/cells/.partial-*`` and renamed into place only when complete, so a
folder under ``cells/`` always holds a whole run, whatever was killed when. A finished sweep may
keep its cells in an archive of four files instead (``archive.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from p2pfed.atomic import write_text_atomically
from p2pfed.sweeps.cells import CellSpec, Point

MANIFEST = "sweep.json"
PARTIAL = ".partial-"


def cell_dir(out: Path, cell: CellSpec) -> Path:
    return out / "cells" / cell.folder


def failure_file(out: Path, cell: CellSpec) -> Path:
    return out / "failed" / f"{cell.folder}.txt"


def is_done(out: Path, cell: CellSpec) -> bool:
    return (cell_dir(out, cell) / "summary.json").is_file()


def failure(out: Path, cell: CellSpec) -> str | None:
    """The one-line error of a failed cell, or None."""
    path = failure_file(out, cell)
    return path.read_text().split("\n", 1)[0] if path.is_file() else None


def partial_dir(out: Path, cell: CellSpec) -> Path:
    return out / "cells" / f"{PARTIAL}{cell.folder}-{uuid.uuid4().hex[:8]}"


def commit(out: Path, cell: CellSpec, partial: Path) -> None:
    """Move a finished run into place (replacing an older copy) and clear a stale failure."""
    final = cell_dir(out, cell)
    if final.exists():
        shutil.rmtree(final)
    os.replace(partial, final)
    failure_file(out, cell).unlink(missing_ok=True)


def record_failure(out: Path, cell: CellSpec, error: str, detail: str = "") -> None:
    path = failure_file(out, cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{error}\n{detail}")


def clear_partials(out: Path) -> None:
    """Remove folders left by runs that were interrupted."""
    for p in (out / "cells").glob(f"{PARTIAL}*"):
        shutil.rmtree(p, ignore_errors=True)


def write_manifest(out: Path, name: str, source: str, keys: list[str], points: list[Point]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = {"name": name, "sweep_file": source, "keys": keys,
            "points": [{"method": p.method, "seed": p.seed, "values": [[k, v] for k, v in p.values],
                        "cell": p.cell.to_dict()} for p in points]}
    write_text_atomically(out / MANIFEST, json.dumps(data, indent=1) + "\n")


def read_manifest(out: Path) -> tuple[str, list[str], list[Point]]:
    """(name, swept keys, points) of the sweep in ``out``."""
    data: dict[str, Any] = json.loads((out / MANIFEST).read_text())
    points = [Point(p["method"], p["seed"], tuple((k, v) for k, v in p["values"]),
                    CellSpec.from_dict(p["cell"])) for p in data["points"]]
    return data["name"], data["keys"], points


def has_manifest(out: Path) -> bool:
    return (out / MANIFEST).is_file()
