"""The paired columns of a results README's table, from a sweep's ``paired.csv``.

For each configuration of the sweep, its difference from each named baseline configuration
(``--against local,gossip-avg``): the mean F1 difference over seeds (the test's unit), its 95 %
t interval and the p-value adjusted over the sweep's comparisons (Benjamini–Hochberg), in bold
where the adjusted p is below 0.05 — the rule the READMEs claim a difference by. Prints a
markdown table.

    python bench/paired_table.py bench/results/wisdm-static-seeds --against local,gossip-avg
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from p2pfed.sweeps.paired import read_paired

ALPHA = 0.05


def signed(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−")


def cell(row: dict[str, str], sign: float) -> str:
    """``**+0.053** [+0.044, +0.063] p 0.0002`` for a − b (sign 1) or b − a (sign −1)."""
    diff = sign * float(row["f1_diff"])
    if row["p_value"] == "":
        return f"{signed(diff)} (no spread)"
    lo, hi = sorted(sign * float(row[k]) for k in ("f1_diff_ci_low", "f1_diff_ci_high"))
    p = float(row["p_adjusted"])
    text = f"**{signed(diff)}**" if p < ALPHA else signed(diff)
    return f"{text} [{signed(lo)}, {signed(hi)}] p {p:.2g}"


def table(rows: list[dict[str, str]], against: list[str]) -> list[list[str]]:
    """One line per configuration, in the file's order: its name, then one cell per baseline."""
    names = list(dict.fromkeys([r["a"] for r in rows] + [r["b"] for r in rows]))
    lookup = {(r["a"], r["b"]): (r, 1.0) for r in rows} | {(r["b"], r["a"]): (r, -1.0) for r in rows}
    lines = []
    for name in names:
        cells = []
        for base in against:
            found = lookup.get((name, base))
            cells.append("–" if found is None else cell(*found))
        lines.append([name, *cells])
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="a sweep's results folder")
    parser.add_argument("--against", default="local,gossip-avg", help="baseline configurations, comma-separated")
    parser.add_argument("--protocol", default=None,
                        help="after-fusion or after-training (default: the runs' headline protocol)")
    args = parser.parse_args(argv)
    source = args.sweep / "paired.csv"
    if not source.is_file():
        print(f"{source}: not found (run the sweep, or `p2pfed report {args.sweep}`)", file=sys.stderr)
        return 1
    rows = read_paired(source, args.protocol)
    against = [a.strip() for a in args.against.split(",") if a.strip()]
    first = rows[0] if rows else {}
    print(f"protocol: {first.get('protocol', '?')}; unit: {first.get('unit', '?')}, "
          f"n = {first.get('n', '?')} per pair; p adjusted "
          f"({first.get('adjustment', '?')}) over {first.get('comparisons', '?')} comparisons; bold: p < {ALPHA}")
    print("| configuration | " + " | ".join(f"vs {a} (95 % CI over seeds, adjusted p)" for a in against) + " |")
    print("|---|" + "---|" * len(against))
    for line in table(rows, against):
        print("| " + " | ".join(line) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
