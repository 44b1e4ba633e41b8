"""F1 per joule, seed by seed: which method gives the most F1 for the energy a device spends.

Reads every cell's ``summary.json`` of an energy sweep (``sweeps/energy-contacts.yaml``): its
configuration (method, FedSub's exchange, the radio), its seed, the final mean F1 and the joules
per device (``energy.total_j_per_device``, communication and computation apart). For each radio,
every pair of configurations is compared on F1 per joule (final F1 / joules per device) by a
paired t-test over seeds (the unit: one whole run), Benjamini–Hochberg over all the sweep's
comparisons. Writes ``table.md``, ``tests.csv`` and ``f1_vs_joules.png`` into the sweep folder.

    python bench/energy_tests.py bench/results/energy-contacts
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from p2pfed.sweeps.archive import stored_cells
from p2pfed.sweeps.paired import adjust, paired_test

ALPHA = 0.05
Run = dict[str, float]


def label(config: dict[str, Any]) -> str:
    algorithm = config["algorithm"]
    name = algorithm["name"]
    return f"{name} {algorithm['exchange']}" if name == "fedsub" else name


def read_cells(folder: Path) -> dict[str, dict[str, dict[int, Run]]]:
    """radio -> configuration -> seed -> {f1, j, comm_j, compute_j}."""
    out: dict[str, dict[str, dict[int, Run]]] = defaultdict(lambda: defaultdict(dict))
    for cell in stored_cells(folder).values():
        s = cell.summary
        energy, config = s["energy"], s["config"]
        out[energy["radio"]["name"]][label(config)][int(config["seed"])] = {
            "f1": float(s["final"]["f1_macro_mean"]), "j": float(energy["total_j_per_device"]),
            "comm_j": float(energy["comm_j_per_device"]), "compute_j": float(energy["compute_j_per_device"])}
    return out


def mean_ci(values: list[float]) -> str:
    m = float(np.mean(values))
    if len(values) < 2:
        return f"{m:.3g}"
    half = float(stats.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values)))
    return f"{m:.3g} [{m - half:.3g}, {m + half:.3g}]"


def tests(cells: dict[str, dict[str, dict[int, Run]]]) -> list[dict[str, Any]]:
    rows = []
    for radio, configs in sorted(cells.items()):
        for a, b in itertools.combinations(sorted(configs), 2):
            seeds = sorted(set(configs[a]) & set(configs[b]))
            ratio = [[configs[c][s]["f1"] / configs[c][s]["j"] for s in seeds] for c in (a, b)]
            test = paired_test(ratio[0], ratio[1])
            rows.append({"radio": radio, "a": a, "b": b, "seeds": len(seeds), **test})
    adjust(rows)
    for r in rows:   # paired_test names its columns f1_*; here they are F1 per joule
        for key in ("f1_a", "f1_b", "f1_diff", "f1_diff_ci_low", "f1_diff_ci_high"):
            r[key.replace("f1", "f1_per_j")] = r.pop(key)
    return rows


def table(cells: dict[str, dict[str, dict[int, Run]]], rows: list[dict[str, Any]]) -> str:
    lines = []
    for radio, configs in sorted(cells.items()):
        lines += [f"### radio: {radio}", "",
                  "| configuration | seeds | F1 | J per device | of which radio | of which compute | F1 per J |",
                  "|---|---|---|---|---|---|---|"]
        order = sorted(configs, key=lambda c: -np.mean([r["f1"] / r["j"] for r in configs[c].values()]))
        for c in order:
            runs = list(configs[c].values())
            lines.append(f"| {c} | {len(runs)} | {mean_ci([r['f1'] for r in runs])} | "
                         f"{mean_ci([r['j'] for r in runs])} | {mean_ci([r['comm_j'] for r in runs])} | "
                         f"{mean_ci([r['compute_j'] for r in runs])} | {mean_ci([r['f1'] / r['j'] for r in runs])} |")
        decided = [r for r in rows if r["radio"] == radio and r["p_adjusted"] != "" and float(r["p_adjusted"]) < ALPHA]
        lines += ["", "Differences in F1 per joule decided (adjusted p < 0.05): "
                  + (", ".join(_ordered(r) for r in decided) or "none") + ".", ""]
    n = rows[0]["comparisons"] if rows else 0
    lines.append(f"Means over seeds with 95 % t intervals; F1 per J is each run's final F1 over its joules per device. "
                 f"Paired t-tests over seeds, Benjamini–Hochberg over {n} comparisons.")
    return "\n".join(lines) + "\n"


def _ordered(row: dict[str, Any]) -> str:
    """``higher > lower (p ...)`` for a decided comparison."""
    high, low = (row["a"], row["b"]) if float(row["f1_per_j_diff"]) > 0 else (row["b"], row["a"])
    return f"{high} > {low} (p {float(row['p_adjusted']):.2g})"


def plot(cells: dict[str, dict[str, dict[int, Run]]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    radios = sorted(cells)
    fig, axes = plt.subplots(1, len(radios), figsize=(4.5 * len(radios), 3.6), squeeze=False)
    for ax, radio in zip(axes[0], radios):
        for c, runs in sorted(cells[radio].items()):
            ax.scatter([r["j"] for r in runs.values()], [r["f1"] for r in runs.values()], label=c, s=18)
        ax.set_xscale("log")
        ax.set_xlabel("joules per device")
        ax.set_title(f"radio: {radio}", fontsize=9)
    axes[0][0].set_ylabel("final F1 (each seed)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="an energy sweep's results folder")
    args = parser.parse_args(argv)
    cells = read_cells(args.sweep)
    rows = tests(cells)
    with open(args.sweep / "tests.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["radio"])
        writer.writeheader()
        writer.writerows(rows)
    text = table(cells, rows)
    (args.sweep / "table.md").write_text(text)
    plot(cells, args.sweep / "f1_vs_joules.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
