"""Collaboration gain: each method's F1 minus local training's, against the share of data kept.

Reads a data-fraction sweep's ``paired.csv`` (``p2pfed sweep sweeps/quickstart-data-fraction.yaml``):
at each ``dataset.train_fraction`` the gain of a method is its paired difference from ``local``
at the same fraction (same seeds, same devices, same test sets), with the 95 % interval and the
p-value of the paired t-test whose unit is the seed, raw and adjusted over the sweep's
comparisons (``paired.csv``'s own). Writes ``collaboration_gain.csv`` and
``collaboration_gain.png`` next to it and prints the table.

    python bench/collaboration_gain.py bench/results/quickstart-data-fraction
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from p2pfed.sweeps.paired import read_paired  # noqa: E402

KEY = "dataset.train_fraction"
BASELINE = "local"
COLUMNS = ["method", "train_fraction", "f1_method", "f1_local", "gain", "gain_ci_low", "gain_ci_high",
           "p_value", "p_adjusted", "seeds"]


def parse(label: str) -> tuple[str, float] | None:
    """``fedsub dataset.train_fraction=0.25`` -> ("fedsub", 0.25); None without the key."""
    m = re.fullmatch(rf"(\S+)(?: .*)? {re.escape(KEY)}=([0-9.eE+-]+)(?: .*)?", label)
    return (m.group(1), float(m.group(2))) if m else None


def gains(rows: list[dict[str, str]]) -> list[dict[str, object]]:
    """One row per (method, fraction): the method minus local at that fraction."""
    out = []
    for row in rows:
        a, b = parse(row["a"]), parse(row["b"])
        if a is None or b is None or a[1] != b[1] or BASELINE not in (a[0], b[0]) or a[0] == b[0]:
            continue
        sign = 1.0 if b[0] == BASELINE else -1.0   # the file holds a - b
        method = a[0] if sign > 0 else b[0]
        lo, hi = sign * float(row["f1_diff_ci_low"]), sign * float(row["f1_diff_ci_high"])
        out.append({"method": method, "train_fraction": a[1],
                    "f1_method": float(row["f1_a"] if sign > 0 else row["f1_b"]),
                    "f1_local": float(row["f1_b"] if sign > 0 else row["f1_a"]),
                    "gain": sign * float(row["f1_diff"]), "gain_ci_low": min(lo, hi),
                    "gain_ci_high": max(lo, hi), "p_value": float(row["p_value"]),
                    "p_adjusted": float(row["p_adjusted"]), "seeds": int(row["n"])})
    return sorted(out, key=lambda r: (r["method"], r["train_fraction"]))


def plot(table: list[dict[str, object]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for method in sorted({r["method"] for r in table}):
        rows = [r for r in table if r["method"] == method]
        x = [r["train_fraction"] for r in rows]
        y = [r["gain"] for r in rows]
        err = [[r["gain"] - r["gain_ci_low"] for r in rows], [r["gain_ci_high"] - r["gain"] for r in rows]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=method)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    fractions = sorted({r["train_fraction"] for r in table})
    ax.set_xticks(fractions, [f"{f:g}" for f in fractions])
    ax.set_xlabel("share of each device's training data kept")
    ax.set_ylabel("macro-F1 minus local training's (95 % CI over seeds)")
    ax.set_title("Collaboration gain over local training")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="a data-fraction sweep's results folder")
    args = parser.parse_args(argv)
    source = args.sweep / "paired.csv"
    if not source.is_file():
        print(f"{source}: not found (run the sweep, or `p2pfed report {args.sweep}`)", file=sys.stderr)
        return 1
    table = gains(read_paired(source))
    if not table:
        print(f"{source}: no pair of a method and {BASELINE!r} at the same {KEY}", file=sys.stderr)
        return 1
    with (args.sweep / "collaboration_gain.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    plot(table, args.sweep / "collaboration_gain.png")
    for r in table:
        print(f"{r['method']:<12} {r['train_fraction']:>5g}  gain {r['gain']:+.4f} "
              f"[{r['gain_ci_low']:+.4f}, {r['gain_ci_high']:+.4f}]  p {r['p_value']:.2g} "
              f"(adjusted {r['p_adjusted']:.2g})  (F1 {r['f1_method']:.4f} vs local {r['f1_local']:.4f}, "
              f"{r['seeds']} seeds)")
    print(f"wrote {args.sweep / 'collaboration_gain.csv'} and collaboration_gain.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
