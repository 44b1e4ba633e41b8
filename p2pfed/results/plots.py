"""Plots of one run (F1 and bytes over rounds) and of a comparison between methods."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from p2pfed.atomic import atomic_path  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.colors import ListedColormap


def plot_run(rows: list[dict[str, Any]], path: Path, title: str = "") -> None:
    plot_comparison({"": rows}, path, title=title)


def plot_comparison(runs: dict[str, list[dict[str, Any]]], path: Path, title: str = "") -> None:
    """Mean macro-F1 (with ±std band) and cumulative megabytes sent, per round, one line per run."""
    save_figure(comparison_figure(runs, title), path)


def save_figure(fig: Any, path: Path, *, dpi: int = 110, close: bool = True) -> None:
    """Write ``fig`` to ``path`` atomically (and close it, unless the caller keeps it)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi)
    if close:
        plt.close(fig)


def comparison_figure(runs: dict[str, list[dict[str, Any]]], title: str = "") -> Any:
    """The figure of ``plot_comparison``."""
    fig, (ax_f1, ax_bytes) = plt.subplots(1, 2, figsize=(11, 4))
    colours = cast("ListedColormap", plt.get_cmap("tab10" if len(runs) <= 10 else "tab20")).colors
    for ax in (ax_f1, ax_bytes):
        ax.set_prop_cycle(color=colours)
    for label, rows in runs.items():
        r = [float(x["round"]) for x in rows]
        f1 = [float(x["f1_macro_mean"]) for x in rows]
        sd = [float(x["f1_macro_std"]) for x in rows]
        line, = ax_f1.plot(r, f1, label=label or None)
        ax_f1.fill_between(r, [a - b for a, b in zip(f1, sd)], [a + b for a, b in zip(f1, sd)],
                           color=line.get_color(), alpha=0.15)
        ax_bytes.plot(r, [float(x["bytes_sent_total"]) / 1e6 for x in rows], label=label or None)
    ax_f1.set(xlabel="round", ylabel="mean macro-F1 over devices", ylim=(0, 1))
    ax_bytes.set(xlabel="round", ylabel="MB sent (all devices, cumulative)")
    for ax in (ax_f1, ax_bytes):
        ax.grid(alpha=0.3)
        if any(runs):
            ax.legend()
    if title:
        fig.suptitle(title)
    # fixed margins, wide enough for these axes' labels: tight_layout would draw the figure once
    # more to measure them, which costs as much as writing it
    fig.subplots_adjust(left=0.065, right=0.985, bottom=0.12, top=0.9 if title else 0.96, wspace=0.22)
    return fig


def plot_contacts(plan, times: list[float], path: Path, title: str = "") -> None:
    """Snapshots of the contact graph at the given simulated times, side by side (circular layout,
    so a device keeps its place from one panel to the next)."""
    import networkx as nx

    fig, axes = plt.subplots(1, len(times), figsize=(3.6 * len(times), 3.8), squeeze=False)
    for ax, t in zip(axes[0], times):
        g = plan.snapshot(t)
        nx.draw_circular(g, ax=ax, node_size=60, node_color="tab:blue", edge_color="tab:orange",
                         width=1.5, with_labels=False)
        ax.set_title(f"t = {t:g} s: {g.number_of_edges()} contacts", fontsize=9)
    if title:
        fig.suptitle(title)
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=0.84 if title else 0.92, wspace=0.05)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
