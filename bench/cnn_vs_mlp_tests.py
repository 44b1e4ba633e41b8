"""The CNN against the MLP, method by method, from the digits-cnn-vs-mlp sweep's cells, seed by seed.

Reads every cell's ``summary.json``: its method, its model (``cnn`` or ``mlp``), its seed, its
final personalization F1 (``final.f1_macro_mean``) and its bytes per device per round. The unit of
every test is the seed (one whole run; the same seed gives both models the same devices, data
split and graph). Two families of two-sided paired t-tests, adjusted together over their number
of comparisons (Benjamini–Hochberg), a difference claimed only where the adjusted p < 0.05:

- **CNN − MLP** for each method;
- **method − local** within each model (does collaboration pay on this model?).

    python bench/cnn_vs_mlp_tests.py bench/results/digits-cnn-vs-mlp

writes ``tests.csv`` and ``table.md`` into the sweep folder and prints the table.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from p2pfed.sweeps.archive import stored_cells
from p2pfed.sweeps.paired import adjust, paired_test

ALPHA = 0.05
MODELS = ("cnn", "mlp")


def read_cells(folder: Path) -> tuple[dict[tuple[str, str], dict[int, float]], dict[tuple[str, str], list[float]]]:
    """(method, model) -> seed -> final F1, and (method, model) -> bytes per device per round."""
    f1: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    sent: dict[tuple[str, str], list[float]] = defaultdict(list)
    for cell in stored_cells(folder).values():
        s = cell.summary
        key = (s["config"]["algorithm"]["name"], s["config"]["model"]["name"])
        f1[key][int(s["config"]["seed"])] = float(s["final"]["f1_macro_mean"])
        sent[key].append(float(s["comm"]["bytes_per_device_per_round"]))
    return f1, sent


def comparison(label: str, family: str, a: dict[int, float], b: dict[int, float]) -> dict[str, Any]:
    seeds = sorted(set(a) & set(b))
    return {"comparison": label, "family": family, "seeds": len(seeds),
            **paired_test([a[s] for s in seeds], [b[s] for s in seeds])}


def run_tests(f1: dict[tuple[str, str], dict[int, float]]) -> list[dict[str, Any]]:
    methods = sorted({m for m, _ in f1}, key=lambda m: (m in ("gossip-avg", "local"), m))
    rows = [comparison(f"{m}: cnn − mlp", "cnn − mlp", f1[(m, "cnn")], f1[(m, "mlp")])
            for m in methods if (m, "cnn") in f1 and (m, "mlp") in f1]
    rows += [comparison(f"{model}: {m} − local", "method − local", f1[(m, model)], f1[("local", model)])
             for model in MODELS for m in methods if m != "local" and (m, model) in f1 and ("local", model) in f1]
    return adjust(rows)


def signed(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−")


def cell(row: dict[str, Any]) -> str:
    if row["p_value"] == "":
        return f"{signed(row['f1_diff'])} (no spread)"
    text = f"**{signed(row['f1_diff'])}**" if float(row["p_adjusted"]) < ALPHA else signed(row["f1_diff"])
    low, high = signed(row["f1_diff_ci_low"]), signed(row["f1_diff_ci_high"])
    return f"{text} [{low}, {high}] p {float(row['p_adjusted']):.2g}"


def table(f1: dict[tuple[str, str], dict[int, float]], sent: dict[tuple[str, str], list[float]],
          rows: list[dict[str, Any]]) -> str:
    by_label = {r["comparison"]: r for r in rows}
    methods = sorted({m for m, _ in f1}, key=lambda m: -np.mean(list(f1.get((m, "cnn"), {0: 0}).values())))
    lines = ["| method | F1, CNN | F1, MLP | CNN − MLP (95 % CI, adjusted p) | bytes/device/round, CNN | "
             "bytes/device/round, MLP | CNN − local | MLP − local |", "|---" * 8 + "|"]
    for m in methods:
        cnn, mlp = f1.get((m, "cnn"), {}), f1.get((m, "mlp"), {})
        vs_local = [cell(by_label[f"{model}: {m} − local"]) if f"{model}: {m} − local" in by_label else "–"
                    for model in MODELS]
        lines.append(f"| {m} | {np.mean(list(cnn.values())):.3f} | {np.mean(list(mlp.values())):.3f} | "
                     f"{cell(by_label[f'{m}: cnn − mlp'])} | {np.mean(sent[(m, 'cnn')]):,.0f} | "
                     f"{np.mean(sent[(m, 'mlp')]):,.0f} | {vs_local[0]} | {vs_local[1]} |")
    seeds = sorted({s for runs in f1.values() for s in runs})
    lines.append("")
    lines.append(f"Seeds {seeds}; two-sided paired t-tests over seeds, Benjamini–Hochberg over the "
                 f"{rows[0]['comparisons']} comparisons of both families; bold: adjusted p < {ALPHA}.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    args = ap.parse_args()
    f1, sent = read_cells(args.folder)
    rows = run_tests(f1)
    with (args.folder / "tests.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    text = table(f1, sent, rows)
    (args.folder / "table.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
