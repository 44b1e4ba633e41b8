"""Benchmark: the one-problem DBI sweep (tests/reference_clustering.py) vs scikit-learn, 36 x 512 dims.

Also reports which K the DBI picks on unstructured prototypes (pure Gaussian noise), where any
"structure" found is spurious. Run: python bench/bench_clustering.py
"""

from __future__ import annotations

import time
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import davies_bouldin_score
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the one-problem path lives in tests/
from tests.reference_clustering import choose_k_by_dbi  # noqa: E402


def sklearn_sweep(x: np.ndarray, n_init: int) -> int:
    """Reference sweep, BLAS/OpenMP held to one thread like ours (its tiny threaded calls crawl
    on a busy machine)."""
    best_k, best = 0, np.inf
    with threadpool_limits(limits=1):
        for k in range(2, x.shape[0]):
            lab = KMeans(k, n_init=n_init, random_state=0).fit_predict(x)
            score = davies_bouldin_score(x, lab)
            if score < best:
                best_k, best = k, score
    return best_k


def best_of(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    x = np.random.default_rng(0).normal(size=(36, 512))
    choose_k_by_dbi(x)
    for n_init in (1, 4):
        ours = best_of(lambda: choose_k_by_dbi(x, n_init=n_init))
        ref = best_of(lambda: sklearn_sweep(x, n_init), repeats=3)
        print(f"n_init={n_init}: ours {ours * 1e3:6.1f} ms  sklearn {ref * 1e3:6.1f} ms  "
              f"speed-up {ref / ours:4.1f}x")
    picks = Counter(choose_k_by_dbi(np.random.default_rng(s).normal(size=(36, 512))).k
                    for s in range(20))
    print("K chosen on 20 unstructured 36x512 Gaussian sets:", dict(sorted(picks.items())))
    picks = Counter(sklearn_sweep(np.random.default_rng(s).normal(size=(36, 512)), 1)
                    for s in range(5))
    print("sklearn reference on the first 5 of them:", dict(sorted(picks.items())))


if __name__ == "__main__":
    main()
