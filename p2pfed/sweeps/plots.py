"""Sweep plots: F1 and bytes against the swept value with 95 % CI bands (``sweep.png``), and F1 over
rounds or simulated time per method, one panel per swept value (``f1_curves.png``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from p2pfed.sweeps.aggregate import mean_ci  # noqa: E402


def _numeric(texts: list[str]) -> list[float] | None:
    try:
        return [float(t) for t in texts]
    except ValueError:
        return None


def plot_sweep(rows: list[dict[str, Any]], keys: list[str], path: Path, title: str = "") -> None:
    """Mean final F1 and bytes per device per round against the first swept key, one line per
    method (and per value of any further swept key), with the 95 % CI over seeds as a band."""
    fig, (ax_f1, ax_bytes) = plt.subplots(1, 2, figsize=(11, 4))
    x_key = keys[0] if keys else "method"
    lines: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        label = ", ".join([row["method"], *(f"{k}={row[k]}" for k in keys[1:])])
        lines.setdefault(label, []).append(row)
    all_x = list(dict.fromkeys(str(r[x_key]) for r in rows))
    numbers = _numeric(all_x) if keys else None
    position = dict(zip(all_x, numbers if numbers is not None else range(len(all_x))))
    for label, members in lines.items():
        x = [position[str(r[x_key])] for r in members]
        for ax, metric, scale in ((ax_f1, "f1", 1.0), (ax_bytes, "bytes_per_device_per_round", 1e-6)):
            y = [_num(r[f"{metric}_mean"]) * scale for r in members]
            line, = ax.plot(x, y, "o-", label=label)
            low = [_num(r[f"{metric}_ci_low"]) * scale for r in members]
            high = [_num(r[f"{metric}_ci_high"]) * scale for r in members]
            if any(math.isnan(v) for v in low + high):
                continue
            if len(x) > 1:
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
            else:  # a single point: the interval as an error bar
                ax.errorbar(x, y, yerr=[[y[0] - low[0]], [high[0] - y[0]]], color=line.get_color(), capsize=4)
    for ax in (ax_f1, ax_bytes):
        ax.set_xlabel(x_key)
        if numbers is None:
            ax.set_xticks(range(len(all_x)), all_x, rotation=20 if len(all_x) > 4 else 0)
        elif min(numbers) > 0 and max(numbers) / min(numbers) >= 50:
            ax.set_xscale("log")
        elif len(numbers) <= 8:
            ax.set_xticks(numbers, all_x)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax_f1.set(ylabel="final mean macro-F1 (95 % CI over seeds)", ylim=(0, 1))
    ax_bytes.set(ylabel="MB per device per round (95 % CI)")
    _save(fig, path, title)


def plot_curves(x_column: str, panels: dict[tuple, dict[str, list[list[tuple[float, float]]]]],
                path: Path, title: str = "") -> None:
    """One panel per swept-values combination: mean F1 over seeds against rounds (or simulated
    time), one line per method, 95 % CI band where there are several seeds."""
    n = max(len(panels), 1)
    cols = min(n, 3)
    fig, axes = plt.subplots(math.ceil(n / cols), cols, figsize=(4.6 * cols, 3.4 * math.ceil(n / cols)),
                             squeeze=False)
    for ax, (values, methods) in zip(axes.ravel(), panels.items()):
        for method, seeds in methods.items():
            common = sorted(set.intersection(*(set(x for x, _ in s) for s in seeds)))
            by_x = [[dict(s)[x] for s in seeds] for x in common]
            stats = [mean_ci(v) for v in by_x]
            line, = ax.plot(common, [s[0] for s in stats], label=f"{method} (n={len(seeds)})")
            if len(seeds) > 1:
                ax.fill_between(common, [s[2] for s in stats], [s[3] for s in stats],
                                color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_title(", ".join(f"{k}={v}" for k, v in values) or "all cells", fontsize=9)
        ax.set(xlabel="round" if x_column == "round" else "simulated time (s)", ylabel="mean macro-F1",
               ylim=(0, 1))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    _save(fig, path, title)


def _num(value: Any) -> float:
    return math.nan if value in ("", None) else float(value)


def _save(fig, path: Path, title: str) -> None:
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
