"""Side-by-side results of several methods on one scenario (``p2pfed compare``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from p2pfed.results.files import write_csv
from p2pfed.results.plots import plot_comparison

COMPARISON_COLUMNS = ["algorithm", "f1_macro_mean", "f1_macro_std", "loss_mean", "accuracy_mean",
                      "bytes_per_device_per_round", "msg_vs_full_model", "messages_dropped", "wall_time_s"]
GENERALIZATION = "generalization_f1_mean"   # a column only when the runs measured it


def comparison_row(summary: dict[str, Any]) -> dict[str, Any]:
    comm = summary["comm"]
    return {"algorithm": summary["algorithm"], **summary["final"],
            "bytes_per_device_per_round": comm["bytes_per_device_per_round"],
            "msg_vs_full_model": comm["bytes_per_message_vs_full_model"],
            "messages_dropped": comm["messages_dropped"], "wall_time_s": summary["wall_time_s"]}


def format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A plain aligned text table (numbers to 4 significant decimals)."""
    def cell(v: Any) -> str:
        return f"{v:.4f}" if isinstance(v, float) else str(v)
    body = [[cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(b, widths)))
              for b in body]
    return "\n".join(lines)


def write_comparison(out_dir: Path, summaries: list[dict[str, Any]],
                     rounds_by_algorithm: dict[str, list[dict[str, Any]]], title: str) -> str:
    """comparison.csv and comparison.png in ``out_dir``; returns the printed table."""
    rows = [comparison_row(s) for s in summaries]
    columns = list(COMPARISON_COLUMNS)
    if any(GENERALIZATION in r for r in rows):
        columns.insert(columns.index("f1_macro_std") + 1, GENERALIZATION)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / "comparison.csv", columns, rows)
    plot_comparison(rounds_by_algorithm, out_dir / "comparison.png", title=title)
    return format_table(rows, columns)
