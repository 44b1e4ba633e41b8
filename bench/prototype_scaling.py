"""Measurement: do users' input prototypes encode how they move, or their class mix? (issue 30, goal 4)

FedSub's default prototypes (``prototypes: input``) are the class means of a device's scaled
training inputs (``p2pfed.learning.prototypes.class_means``, as ``fedsub/method.py`` calls it).
``dataset.scaling: device`` subtracts the device's own training mean, which is a mix of its class
means weighted by its class shares; so a user's Walking prototype moves with how much that user
jogs or sits, not only with how the user walks. ``federation`` applies one transform to every
device (the pooled training statistics), ``none`` none.

For each scenario, scaling, data-split seed and class c, over the users holding c (no training):

* D_proto[i, j]: Euclidean distance between users i's and j's class-c prototypes;
* D_mix[i, j]: total-variation distance between their class mixes (half the L1 distance of the
  vectors of training-class shares);
* Spearman's rho between the two matrices' upper triangles (``scipy.stats.spearmanr``), and a
  one-sided Mantel permutation p-value: the users of D_proto are permuted (rows and columns
  together) ``--permutations`` times, p = (1 + #{rho_perm >= rho}) / (1 + permutations).
* how much of the unscaled geometry a scaling keeps: Spearman's rho between D_proto under the
  scaling and D_proto of the unscaled (``none``) prototypes of the same users
  (``rho_vs_unscaled``; 1 for ``none`` itself).

Run: python bench/prototype_scaling.py [--seeds 1 2 3] [--permutations 999]
     [--out bench/results/prototype-scaling]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
import torch
from scipy.stats import rankdata, spearmanr

from p2pfed.learning.prototypes import class_means
from p2pfed.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("wisdm-paperlike", "wisdm-static")
SCALINGS = ("device", "federation", "none")
COLUMNS = ["scenario", "features", "scaling", "seed", "class", "users", "pairs", "spearman_rho",
           "mantel_p", "permutations", "rho_vs_unscaled"]


def prototypes_and_mixes(scenario: str, scaling: str, seed: int) -> tuple[list[str], int, np.ndarray, np.ndarray]:
    """(class names, features, prototypes (devices, C, d) with NaN rows for absent classes,
    class mixes (devices, C)) of the scenario's devices under ``scaling``."""
    loaded = load_scenario(ROOT / "scenarios" / f"{scenario}.yaml", [f"dataset.scaling={scaling}"], seed=seed)
    data = loaded.federation
    protos = np.full((len(data.devices), data.num_classes, data.num_features), np.nan)
    mixes = np.zeros((len(data.devices), data.num_classes))
    for i, dev in enumerate(data.devices):
        classes, means, counts = class_means(torch.from_numpy(dev.x_train), torch.from_numpy(dev.y_train),
                                             data.num_classes)
        protos[i, classes] = means
        mixes[i, classes] = counts / counts.sum()
    return data.class_names, data.num_features, protos, mixes


def distances(points: np.ndarray, metric: str) -> np.ndarray:
    diff = points[:, None, :] - points[None, :, :]
    if metric == "euclidean":
        return np.sqrt(np.square(diff).sum(axis=-1))
    return 0.5 * np.abs(diff).sum(axis=-1)   # total variation


def mantel(d_proto: np.ndarray, d_mix: np.ndarray, permutations: int,
           rng: np.random.Generator) -> tuple[float, float]:
    """Spearman's rho of the upper triangles and its one-sided permutation p-value."""
    upper = np.triu_indices(len(d_proto), k=1)
    rho = float(spearmanr(d_proto[upper], d_mix[upper]).statistic)
    # Permuting users permutes the entries, so the ranks of a permuted D_proto are the permuted
    # ranks: rank once, then Pearson's r of ranks (= Spearman's rho) per permutation.
    ranks = np.zeros_like(d_proto)
    ranks[upper] = rankdata(d_proto[upper])
    ranks = ranks + ranks.T
    mix_ranks = rankdata(d_mix[upper])
    mix_ranks = (mix_ranks - mix_ranks.mean()) / np.linalg.norm(mix_ranks - mix_ranks.mean())
    assert abs(float(np.dot(_centred(ranks[upper]), mix_ranks)) - rho) < 1e-9
    hits = 0
    for _ in range(permutations):
        perm = rng.permutation(len(d_proto))
        hits += float(np.dot(_centred(ranks[perm][:, perm][upper]), mix_ranks)) >= rho - 1e-12
    return rho, (1 + hits) / (1 + permutations)


def _centred(v: np.ndarray) -> np.ndarray:
    v = v - v.mean()
    return v / np.linalg.norm(v)


def measure(seeds: list[int], permutations: int) -> list[dict]:
    rows = []
    for scenario in SCENARIOS:
        for seed in seeds:
            loaded = {scaling: prototypes_and_mixes(scenario, scaling, seed) for scaling in SCALINGS}
            for scaling in SCALINGS:
                names, features, protos, mixes = loaded[scaling]
                raw = loaded["none"][2]
                rng = np.random.default_rng([seed, SCALINGS.index(scaling), SCENARIOS.index(scenario)])
                for c, name in enumerate(names):
                    users = np.flatnonzero(~np.isnan(protos[:, c, 0]))
                    if len(users) < 4:
                        continue
                    d_proto = distances(protos[users, c], "euclidean")
                    rho, p = mantel(d_proto, distances(mixes[users], "total-variation"), permutations, rng)
                    upper = np.triu_indices(len(users), k=1)
                    same = spearmanr(d_proto[upper], distances(raw[users, c], "euclidean")[upper]).statistic
                    rows.append({"scenario": scenario, "features": features, "scaling": scaling,
                                 "seed": seed, "class": name, "users": len(users),
                                 "pairs": len(users) * (len(users) - 1) // 2,
                                 "spearman_rho": round(rho, 4), "mantel_p": round(p, 4),
                                 "permutations": permutations, "rho_vs_unscaled": round(float(same), 4)})
    return rows


def table(rows: list[dict], seeds: list[int]) -> str:
    """Per scenario and scaling, each class's rho (mean over seeds), largest Mantel p and mean
    rho_vs_unscaled."""
    classes = list(dict.fromkeys(r["class"] for r in rows))
    lines = [f"rho: Spearman, D_proto vs D_mix, mean over seeds {seeds}; p: largest Mantel p over them; "
             "u: mean rho_vs_unscaled",
             "| scenario | scaling | " + " | ".join(classes) + " |",
             "|---|---|" + "---|" * len(classes)]
    for scenario in SCENARIOS:
        for scaling in SCALINGS:
            cells = []
            for name in classes:
                got = [r for r in rows if (r["scenario"], r["scaling"], r["class"]) == (scenario, scaling, name)]
                rho = np.mean([r["spearman_rho"] for r in got])
                kept = np.mean([r["rho_vs_unscaled"] for r in got])
                cells.append(f"{rho:+.2f} (p≤{max(r['mantel_p'] for r in got):.3f}, u={kept:.2f}, "
                             f"n={got[0]['users']})")
            lines.append(f"| {scenario} | {scaling} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="scenario seeds (data splits)")
    parser.add_argument("--permutations", type=int, default=999)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "prototype-scaling")
    args = parser.parse_args()
    rows = measure(args.seeds, args.permutations)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "prototype_scaling.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(table(rows, args.seeds))
    print(f"wrote {args.out / 'prototype_scaling.csv'} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
