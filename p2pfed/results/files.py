"""Writing a run's results: rounds.csv, devices.csv, summary.json and plot.png."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from p2pfed.results.recorder import GENERALIZATION_COLUMNS, Recorder, round_float

ROUND_COLUMNS = ["round", "sim_time_s", "f1_macro_mean", "f1_macro_std", "loss_mean",
                 "accuracy_mean", "bytes_sent_total", "messages_sent", "messages_dropped"]
DEVICE_COLUMNS = ["device", "name", "f1_macro", "loss", "accuracy", "bytes_sent", "bytes_received",
                  "messages_sent", "messages_received", "messages_dropped", "transfers_started",
                  "transfers_completed", "transfers_aborted", "bytes_wasted"]


def write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def device_rows(recorder: Recorder, names: list[str]) -> list[dict[str, Any]]:
    rows = []
    for i, (counters, evaluation) in enumerate(zip(recorder.devices, recorder.last_evaluations)):
        rows.append({"device": recorder.device_ids[i], "name": names[i], "f1_macro": round_float(evaluation.f1_macro),
                     "loss": round_float(evaluation.loss), "accuracy": round_float(evaluation.accuracy),
                     **vars(counters)})
    return rows


def write_run(out_dir: Path, summary: dict[str, Any], recorder: Recorder, names: list[str],
              title_suffix: str = "") -> None:
    """All files of one run into ``out_dir`` (created if needed)."""
    from p2pfed.results.plots import plot_run  # matplotlib only when files are written

    out_dir.mkdir(parents=True, exist_ok=True)
    rows = recorder.rows
    extra = [c for c in GENERALIZATION_COLUMNS if any(c in r for r in rows)]
    write_csv(out_dir / "rounds.csv", ROUND_COLUMNS + extra, rows)
    write_csv(out_dir / "devices.csv", DEVICE_COLUMNS, device_rows(recorder, names))
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
    plot_run(recorder.rows, out_dir / "plot.png",
             title=f"{summary['scenario']} — {summary['algorithm']}{title_suffix}")
