"""Writing a run's results: rounds.csv, devices.csv, summary.json and plot.png.

Every file is written atomically (``p2pfed.atomic``), so a crash never leaves half a file, and
``summary.json`` is written last (an earlier run's is removed first): a results folder without
``summary.json`` is an incomplete run. JSON is strict (no ``NaN``/``Infinity``, which JSON does
not have): a number with no finite value is ``null``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from p2pfed.atomic import atomic_path, write_text_atomically
from p2pfed.results.recorder import GENERALIZATION_COLUMNS, PROTOCOLS, Recorder, protocol_columns, round_float

ROUND_COLUMNS = ["round", "sim_time_s", "f1_macro_mean", "f1_macro_std", "loss_mean",
                 "accuracy_mean", "f1_present_mean", "bytes_sent_total", "messages_sent", "messages_dropped"]
# rounds.csv's columns of each evaluation protocol scored (the round runtimes score both)
PROTOCOL_COLUMNS = [c for p in PROTOCOLS for c in protocol_columns(p)]
DEVICE_COLUMNS = ["device", "name", "f1_macro", "loss", "accuracy", "f1_present", "bytes_sent", "bytes_received",
                  "messages_sent", "messages_received", "messages_dropped", "messages_late", "transfers_started",
                  "transfers_completed", "transfers_aborted", "bytes_wasted"]
# devices.csv's last macro-F1 of each device under each protocol scored
DEVICE_PROTOCOL_COLUMNS = [f"f1_{p.replace('-', '_')}" for p in PROTOCOLS]
# counters only real peers can move (second copies re-sent after a restart): in devices.csv where
# some device's is not zero, so a simulation's files keep their columns
DEVICE_OCCASIONAL_COUNTERS = ["messages_repeated"]


def folder_label(method: str) -> str:
    """A method's name as a folder name: a shipped one as it is, a user's ``path/file.py:MyMethod``
    as ``MyMethod`` (never a path that would leave the results folder)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", method.rpartition(":")[2]).strip(".-") or "method"


def write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    with atomic_path(path) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def finite_or_null(value: Any) -> Any:
    """``value`` with every NaN or infinite float (at any depth) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value


def to_json(value: Any, indent: int | None = 2) -> str:
    """Strict JSON text (``allow_nan=False``), non-finite numbers written as null."""
    return json.dumps(finite_or_null(value), indent=indent, allow_nan=False) + "\n"


def write_json(path: Path, value: Any, indent: int | None = 2) -> None:
    """``value`` as strict JSON (see ``to_json``), written atomically."""
    write_text_atomically(path, to_json(value, indent))


def output_dir_problem(path: Path) -> str | None:
    """Why results cannot be written in folder ``path`` (None: they can); checked before any
    work, so a run never computes for hours and then fails to write."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        return f"{path}: exists and is not a folder"
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{path}: cannot be made, {existing} is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{path}: cannot write in {existing} (permission denied)"
    return None


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def device_rows(recorder: Recorder, names: list[str]) -> list[dict[str, Any]]:
    under = {column: recorder.last_evaluations_under(p) for column, p in zip(DEVICE_PROTOCOL_COLUMNS, PROTOCOLS)}
    rows = []
    for i, (counters, evaluation) in enumerate(zip(recorder.devices, recorder.last_evaluations)):
        rows.append({"device": recorder.device_ids[i], "name": names[i], "f1_macro": round_float(evaluation.f1_macro),
                     "loss": round_float(evaluation.loss), "accuracy": round_float(evaluation.accuracy),
                     "f1_present": round_float(evaluation.f1_present),
                     **{column: round_float(last[i].f1_macro) for column, last in under.items() if last is not None},
                     **vars(counters)})
    for column in DEVICE_OCCASIONAL_COUNTERS:
        if not any(row[column] for row in rows):
            for row in rows:
                del row[column]
    return rows


def _more(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    """Columns some rows carry beyond ``columns`` (the energy model's), in first-seen order."""
    known = set(columns)
    out: list[str] = []
    for row in rows:
        out += [k for k in row if k not in known and k not in out]
    return out


def write_run(out_dir: Path, summary: dict[str, Any], recorder: Recorder, names: list[str],
              title_suffix: str = "", dataset: dict[str, Any] | None = None,
              round_columns: dict[int, dict[str, Any]] | None = None,
              device_columns: list[dict[str, Any]] | None = None) -> None:
    """All files of one run into ``out_dir`` (created if needed); ``dataset``: the federation's
    account (partition, per-device class counts) for ``dataset.json``, so a result says which
    data split it was measured on; ``round_columns`` (by rounds.csv's 1-based round) and
    ``device_columns`` (by device, in order): more columns for rounds.csv and devices.csv (the
    energy model's, when a scenario has one)."""
    if dataset is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        write_json(Path(out_dir) / "dataset.json", dataset, indent=1)
    rows, devices = recorder.rows, device_rows(recorder, names)
    if round_columns is not None:
        rows = [{**row, **round_columns.get(row["round"], {})} for row in rows]
    if device_columns is not None:
        devices = [{**row, **more} for row, more in zip(devices, device_columns, strict=True)]
    write_results_files(out_dir, summary, rows, devices,
                        title=f"{summary['scenario']} — {summary['algorithm']}{title_suffix}")


def write_results_files(out_dir: Path, summary: dict[str, Any], round_rows: list[dict[str, Any]],
                        devices: list[dict[str, Any]], title: str) -> None:
    """rounds.csv, devices.csv, plot.png, then summary.json (the mark of a complete run)."""
    from p2pfed.results.plots import plot_run  # matplotlib only when files are written

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").unlink(missing_ok=True)
    extra = [c for c in PROTOCOL_COLUMNS + list(GENERALIZATION_COLUMNS) if any(c in r for r in round_rows)]
    write_csv(out_dir / "rounds.csv", ROUND_COLUMNS + extra + _more(round_rows, ROUND_COLUMNS + extra), round_rows)
    device_columns = DEVICE_COLUMNS + [c for c in DEVICE_PROTOCOL_COLUMNS if any(c in d for d in devices)]
    write_csv(out_dir / "devices.csv", device_columns + _more(devices, device_columns), devices)
    plot_run(round_rows, out_dir / "plot.png", title=title)
    write_json(out_dir / "summary.json", summary)
