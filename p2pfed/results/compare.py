"""Side-by-side results of several methods on one scenario (``p2pfed compare``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from p2pfed.results.files import write_csv

COMPARISON_COLUMNS = ["algorithm", "f1_macro_mean", "f1_macro_std", "loss_mean", "accuracy_mean",
                      "bytes_per_device_per_round", "msg_vs_full_model", "messages_dropped", "wall_time_s"]
GENERALIZATION = "generalization_f1_mean"   # a column only when the runs measured it
# F1 after the fusion and after the training (the round runtimes score both): they can rank differently
PROTOCOL_F1 = ["f1_after_fusion_mean", "f1_after_training_mean"]
# joules per device, radio and arithmetic apart: columns only when the runs model energy (``devices``)
ENERGY = ["j_per_device", "comm_j_per_device", "compute_j_per_device"]


def comparison_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The table's columns: the fixed ones, and after the headline F1 each optional one the rows have."""
    columns = list(COMPARISON_COLUMNS)
    extra = [c for c in [*PROTOCOL_F1, GENERALIZATION, *ENERGY] if any(c in r for r in rows)]
    at = columns.index("f1_macro_std") + 1
    return columns[:at] + extra + columns[at:]


def comparison_row(summary: dict[str, Any]) -> dict[str, Any]:
    comm = summary["comm"]
    return {"algorithm": summary["algorithm"], **summary["final"],
            "bytes_per_device_per_round": comm["bytes_per_device_per_round"],
            "msg_vs_full_model": comm["bytes_per_message_vs_full_model"],
            "messages_dropped": comm["messages_dropped"], "wall_time_s": summary["wall_time_s"],
            **({} if "energy" not in summary else {
                "j_per_device": summary["energy"]["total_j_per_device"],
                "comm_j_per_device": summary["energy"]["comm_j_per_device"],
                "compute_j_per_device": summary["energy"]["compute_j_per_device"]})}


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
    columns = comparison_columns(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / "comparison.csv", columns, rows)
    from p2pfed.results.plots import plot_comparison  # matplotlib only when a plot is drawn
    plot_comparison(rounds_by_algorithm, out_dir / "comparison.png", title=title)
    return format_table(rows, columns)
