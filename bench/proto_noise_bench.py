"""Benchmark: how prototype noise degrades the per-class clustering (FedSub journal Sec. 3.3, Fig. 3).

Every WISDM device (quickstart setting: 36 users, shared initial weights) trains locally for a
few epochs, then computes its class prototypes (512-d penultimate features). Gaussian noise of
growing standard deviation is added, as ``algorithm.proto_noise: gaussian`` does on the wire, and
we report, averaged over classes and noise draws:

* DBI (lower is better) and Calinski–Harabasz (higher is better), scikit-learn, of K-means with a
  fixed K (``--k``; the paper fixes K to isolate the effect of the noise);
* the adjusted Rand index between the noisy and the clean partition at that K;
* the mean K that FedSub's own DBI sweep (K in 2..n-1) would choose on the noisy prototypes.

Laplace noise with scale b has standard deviation sqrt(2)·b, so one sigma column covers both.
The noise level is also given relative to the spread of the clean prototypes (the mean, over
classes, of the per-coordinate standard deviation across devices).

Run: python bench/proto_noise_bench.py [--epochs 5] [--draws 5] [--k 3]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, calinski_harabasz_score, davies_bouldin_score

from p2pfed.algorithms.fedsub.clustering import choose_k_by_dbi_many
from p2pfed.learning.prototypes import class_prototypes
from p2pfed.learning.training import train_epochs
from p2pfed.scenario.build import build_algorithms
from p2pfed.scenario.loader import load_scenario

SIGMAS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
COLUMNS = ["sigma", "sigma_vs_spread", "dbi", "dbi_std", "calinski_harabasz", "calinski_harabasz_std",
           "ari_vs_clean", "dbi_sweep_k", "k"]


def wisdm_prototypes(epochs: int, seed: int) -> dict[int, np.ndarray]:
    """Class -> (devices holding it, d) prototypes after ``epochs`` local epochs on every device."""
    loaded = load_scenario(None, ["algorithm={name: local}", f"training.epochs={epochs}"], seed=seed)
    algos = build_algorithms(loaded, loaded.federation)
    per_class: dict[int, list[np.ndarray]] = {}
    for a in algos:
        ctx = a.ctx
        train_epochs(ctx.model, ctx.x_train, ctx.y_train, ctx.training, ctx.torch_generator)
        classes, protos, _ = class_prototypes(ctx.model, ctx.x_train, ctx.y_train, ctx.num_classes)
        for c, p in zip(classes, protos):
            per_class.setdefault(int(c), []).append(p)
    return {c: np.stack(v).astype(np.float64) for c, v in per_class.items() if len(v) >= 4}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--k", type=int, default=3, help="fixed K of the clustering measured")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "proto_noise.csv"))
    args = parser.parse_args()
    protos = wisdm_prototypes(args.epochs, args.seed)
    spread = float(np.mean([p.std(axis=0).mean() for p in protos.values()]))
    clean = {c: KMeans(args.k, n_init=10, random_state=0).fit_predict(p) for c, p in protos.items()}
    rng = np.random.default_rng(args.seed)
    rows = []
    for sigma in SIGMAS:
        dbi, ch, ari, sweep_k = [], [], [], []
        for _ in range(args.draws if sigma > 0 else 1):
            for c, p in protos.items():
                noisy = p + rng.normal(0.0, sigma, size=p.shape) if sigma > 0 else p
                labels = KMeans(args.k, n_init=10, random_state=0).fit_predict(noisy)
                if len(set(labels)) < 2:
                    continue
                dbi.append(davies_bouldin_score(noisy, labels))
                ch.append(calinski_harabasz_score(noisy, labels))
                ari.append(adjusted_rand_score(clean[c], labels))
                sweep_k.append(choose_k_by_dbi_many([noisy], seed=args.seed)[0].k)
        rows.append({"sigma": sigma, "sigma_vs_spread": round(sigma / spread, 4),
                     "dbi": round(float(np.mean(dbi)), 4), "dbi_std": round(float(np.std(dbi)), 4),
                     "calinski_harabasz": round(float(np.mean(ch)), 3),
                     "calinski_harabasz_std": round(float(np.std(ch)), 3),
                     "ari_vs_clean": round(float(np.mean(ari)), 4),
                     "dbi_sweep_k": round(float(np.mean(sweep_k)), 2),
                     "k": args.k})
        print(", ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, out.with_suffix(".png"), spread, args.epochs, args.k)
    print(f"wrote {out} and {out.with_suffix('.png')}")


def plot(rows: list[dict], path: Path, spread: float, epochs: int, k: int) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [max(r["sigma"], SIGMAS[1] / 2) for r in rows]   # sigma 0 drawn at the left edge of a log axis
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, key, label in ((axes[0], "dbi", "Davies–Bouldin (lower = better)"),
                           (axes[1], "calinski_harabasz", "Calinski–Harabasz (higher = better)"),
                           (axes[2], "ari_vs_clean", "ARI vs clean partition")):
        y = [r[key] for r in rows]
        ax.plot(x, y, marker="o")
        if key + "_std" in rows[0]:
            sd = [r[key + "_std"] for r in rows]
            ax.fill_between(x, [a - b for a, b in zip(y, sd)], [a + b for a, b in zip(y, sd)], alpha=0.2)
        ax.axvline(spread, color="grey", ls=":", label=f"prototype spread ({spread:.3f})")
        ax.set(xscale="log", xlabel="noise sigma (leftmost point: no noise)", ylabel=label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"WISDM per-class prototype clustering under Gaussian noise "
                 f"(36 users, {epochs} local epochs, K-means with K = {k})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
