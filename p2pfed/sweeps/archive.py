"""A finished sweep's cells in four files instead of one folder each: the sweep folder's archive form.

    OUT/cells.jsonl           one line per cell: its folder name, the columns of its two tables,
                              its dataset's digest and its whole summary.json
    OUT/cells-rounds.csv      every cell's rounds.csv, the cell's folder name first on each row
    OUT/cells-devices.csv     every cell's devices.csv, the same way
    OUT/cells-datasets.jsonl  each distinct dataset.json once, under its digest (the cells of one
                              seed and data split share it)

``pack`` writes them from ``OUT/cells/`` and removes the cell folders only after reading the
archive back and finding every packed file as it was, byte for byte; ``unpack`` writes the cell
folders again (``p2pfed sweep --resume`` does it first). The tables, paired tests and plots of
``p2pfed report`` read either form through ``stored_cells``. A cell's own plots and graph files
(``edges.csv``, ``contacts.csv``) are not kept: ``p2pfed run`` writes them again and the sweep's
tables, plots and page do not need them.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p2pfed.atomic import write_text_atomically
from p2pfed.results.files import read_csv, to_json
from p2pfed.sweeps.spec import SweepError

INDEX = "cells.jsonl"
DATASETS = "cells-datasets.jsonl"
TABLES = {"rounds.csv": "cells-rounds.csv", "devices.csv": "cells-devices.csv"}   # a cell's file -> the sweep's
KEPT = {"summary.json", "dataset.json", *TABLES}
CELL = "cell"   # the tables' first column: the cell's folder name


@dataclass
class StoredCell:
    """One finished cell, from its folder or from the sweep's archive."""

    name: str                                 # its folder name under ``cells/``
    summary: dict[str, Any]
    folder: Path | None = None                # its folder; None: read from the archive
    tables: dict[str, list[dict[str, str]]] = field(default_factory=dict)   # archive: file -> rows
    columns: dict[str, list[str]] = field(default_factory=dict)             # archive: file -> columns
    dataset_json: dict[str, Any] | None = None                             # archive: its dataset.json

    def rows(self, file: str) -> list[dict[str, str]]:
        """The rows of its ``rounds.csv`` or ``devices.csv``, as ``read_csv`` gives them."""
        if self.folder is not None:
            return read_csv(self.folder / file)
        return self.tables[file]

    def dataset(self) -> dict[str, Any] | None:
        """Its ``dataset.json`` (None: the run wrote none)."""
        if self.folder is not None:
            path = self.folder / "dataset.json"
            return json.loads(path.read_text()) if path.is_file() else None
        return self.dataset_json


def is_packed(out: Path) -> bool:
    return (out / INDEX).is_file()


def stored_cells(out: Path) -> dict[str, StoredCell]:
    """Every finished cell of the sweep in ``out`` by folder name: the archive's, then the cell
    folders holding a ``summary.json`` (a folder replaces the archive's copy of its cell)."""
    cells = read_archive(out) if is_packed(out) else {}
    for folder in sorted((out / "cells").glob("*/summary.json")):
        if not folder.parent.name.startswith("."):
            cells[folder.parent.name] = StoredCell(folder.parent.name, json.loads(folder.read_text()), folder.parent)
    return cells


def read_archive(out: Path) -> dict[str, StoredCell]:
    """The cells of the archive in ``out`` by folder name."""
    index = [json.loads(line) for line in (out / INDEX).read_text().splitlines() if line]
    datasets = {}
    if (out / DATASETS).is_file():
        datasets = {d["digest"]: d["dataset"] for d in map(json.loads, (out / DATASETS).read_text().splitlines()) if d}
    grouped: dict[str, dict[str, list[dict[str, str]]]] = {}
    for file, table in TABLES.items():
        for row in read_csv(out / table):
            grouped.setdefault(row[CELL], {}).setdefault(file, []).append(row)
    cells = {}
    for entry in index:
        name, columns = entry["cell"], entry["columns"]
        if entry["dataset"] is not None and entry["dataset"] not in datasets:
            raise SweepError([f"{out / INDEX}: cell {name}: dataset {entry['dataset']} is not in {DATASETS}"])
        tables = {file: [{c: row[c] for c in columns[file]} for row in grouped.get(name, {}).get(file, [])]
                  for file in TABLES}
        cells[name] = StoredCell(name, entry["summary"], None, tables, columns,
                                 None if entry["dataset"] is None else datasets[entry["dataset"]])
    return cells


def render(cell: StoredCell) -> dict[str, str]:
    """A cell's files as ``p2pfed run`` writes them: file name -> text."""
    files = {file: csv_text(cell.columns.get(file) or _columns_of(cell, file), cell.rows(file)) for file in TABLES}
    files["summary.json"] = to_json(cell.summary)
    dataset = cell.dataset()
    if dataset is not None:
        files["dataset.json"] = to_json(dataset, indent=1)
    return files


def csv_text(columns: list[str], rows: Iterable[dict[str, Any]]) -> str:
    """A CSV file's text as ``write_csv`` writes it."""
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _columns_of(cell: StoredCell, file: str) -> list[str]:
    assert cell.folder is not None   # an archived cell has its columns
    with (cell.folder / file).open(newline="") as fh:
        return next(csv.reader(fh), [])


def pack(out: Path) -> list[str]:
    """Write every finished cell of ``out`` into its archive, check that it gives back each packed
    file byte for byte, then remove the cell folders; returns the files left out (a cell's plots)."""
    cells = stored_cells(out)
    folders = [c for c in cells.values() if c.folder is not None]
    for cell in folders:
        assert cell.folder is not None
        missing = [f for f in ("summary.json", *TABLES) if not (cell.folder / f).is_file()]
        if missing:
            raise SweepError([f"{cell.folder}: no {', '.join(missing)}: not a whole run, cannot be packed"])
    scratch = out / f".pack-{uuid.uuid4().hex[:8]}"
    scratch.mkdir()
    try:
        write_archive(scratch, [cells[n] for n in sorted(cells)])
        _check(read_archive(scratch), folders)
        for name in (INDEX, DATASETS, *TABLES.values()):
            if (scratch / name).is_file():
                os.replace(scratch / name, out / name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    left_out = []
    for cell in folders:
        assert cell.folder is not None
        left_out += [str(p) for p in sorted(cell.folder.iterdir()) if p.name not in KEPT]
        shutil.rmtree(cell.folder)
    if (out / "cells").is_dir() and not any((out / "cells").iterdir()):
        (out / "cells").rmdir()
    return left_out


def _check(archived: dict[str, StoredCell], folders: list[StoredCell]) -> None:
    """Refuse (SweepError naming the file) an archive that would not give back a packed file."""
    for cell in folders:
        assert cell.folder is not None
        again = render(archived[cell.name])
        for file in sorted(KEPT):
            path = cell.folder / file
            before = path.read_bytes().decode("utf-8") if path.is_file() else None
            if again.get(file) != before:
                raise SweepError([f"{path}: the archive would not give it back unchanged; nothing was packed"])


def write_archive(out: Path, cells: list[StoredCell]) -> None:
    """The archive's files in ``out`` for ``cells`` (in that order)."""
    index: list[dict[str, Any]] = []
    datasets: dict[str, dict[str, Any]] = {}
    columns = {file: [CELL] for file in TABLES}
    for cell in cells:
        entry_columns = {file: cell.columns.get(file) or _columns_of(cell, file) for file in TABLES}
        for file, names in entry_columns.items():
            columns[file] += [c for c in names if c not in columns[file]]
        dataset, digest = cell.dataset(), None
        if dataset is not None:
            digest = hashlib.sha256(to_json(dataset, indent=None).encode()).hexdigest()[:16]
            datasets.setdefault(digest, dataset)
        index.append({"cell": cell.name, "columns": entry_columns, "dataset": digest, "summary": cell.summary})
    for file, table in TABLES.items():
        rows = ({CELL: cell.name, **row} for cell in cells for row in cell.rows(file))
        write_text_atomically(out / table, csv_text(columns[file], rows))
    write_text_atomically(out / INDEX, "".join(_line(e) for e in index))
    if datasets:
        write_text_atomically(out / DATASETS, "".join(_line({"digest": d, "dataset": v}) for d, v in datasets.items()))


def _line(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False) + "\n"


def unpack(out: Path) -> int:
    """Write the archive's cells back into ``out/cells/`` (a folder already there is kept), then
    remove the archive; returns how many cell folders were written."""
    if not is_packed(out):
        return 0
    written = 0
    for name, cell in read_archive(out).items():
        final = out / "cells" / name
        if final.exists():
            continue
        partial = out / "cells" / f".partial-{name}-{uuid.uuid4().hex[:8]}"
        partial.mkdir(parents=True)
        for file, text in render(cell).items():
            (partial / file).write_text(text, encoding="utf-8", newline="")
        os.replace(partial, final)
        written += 1
    for name in (INDEX, DATASETS, *TABLES.values()):
        (out / name).unlink(missing_ok=True)
    return written
