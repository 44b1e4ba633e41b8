"""The papers' framework averages F1 over clients weighted by their data; ours weighs every device
alike. Per method of each sweep folder: the mean over seeds of the plain device mean of final
macro-F1 (the headline) and of the mean weighted by each device's test samples, so a reader can see
whether the weighting changes a ranking:

    python bench/weighted_f1.py bench/results/wisdm-static-seeds bench/results/wisdm-dynamic-seeds
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from p2pfed.sweeps.archive import stored_cells


def weighted_table(folder: Path) -> list[tuple[str, float, float]]:
    """(method, plain mean, test-sample-weighted mean), best plain mean first."""
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for cell in stored_cells(folder).values():
        summary, dataset = cell.summary, cell.dataset()
        assert dataset is not None, f"{folder}: cell {cell.name} has no dataset.json"
        counts = dataset["class_counts"]
        devices = [r for r in cell.rows("devices.csv") if r["f1_macro"] not in ("", "nan")]
        f1 = np.array([float(r["f1_macro"]) for r in devices])
        weight = np.array([sum(counts[r["name"]]["test"]) for r in devices], dtype=float)
        found[summary["algorithm"]]["plain"].append(float(f1.mean()))
        found[summary["algorithm"]]["weighted"].append(float((f1 * weight).sum() / weight.sum()))
    rows = [(m, float(np.mean(v["plain"])), float(np.mean(v["weighted"]))) for m, v in found.items()]
    return sorted(rows, key=lambda r: -r[1])


def main(folders: list[Path]) -> None:
    for folder in folders:
        rows = weighted_table(folder)
        by_weight = [m for m, _, _ in sorted(rows, key=lambda r: -r[2])]
        print(f"{folder}\n| method | F1, devices alike | F1, weighted by test samples | rank weighted |")
        print("|---|---|---|---|")
        for method, plain, weighted in rows:
            print(f"| {method} | {plain:.4f} | {weighted:.4f} | {by_weight.index(method) + 1} |")
        print()


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])
