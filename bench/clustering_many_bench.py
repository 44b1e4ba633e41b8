"""One round of FedSub clustering: every (device, class) K sweep one at a time vs in one batch.

``choose_k_by_dbi_many`` must return exactly what ``choose_k_by_dbi`` returns for each problem
(checked here too); this measures what batching saves. CPU time (process time), best of
``--repeats``, both measured side by side; read the ratios, not the absolute times.

    python bench/clustering_many_bench.py [--devices 36] [--classes 6] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from p2pfed.algorithms.fedsub.clustering import choose_k_by_dbi_many

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the one-problem path lives in tests/
from tests.reference_clustering import choose_k_by_dbi  # noqa: E402


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=36)
    ap.add_argument("--classes", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    count = args.devices * args.classes
    print(f"{count} problems ({args.devices} devices x {args.classes} classes), n_init=4, K = 2..n-1")
    for lo, hi in ((17, 23), (5, 9)):
        for dim in (512, 43):
            rng = np.random.default_rng(dim + lo)
            problems = [rng.normal(size=(int(rng.integers(lo, hi + 1)), dim)) for _ in range(count)]
            one = [choose_k_by_dbi(p) for p in problems]
            many = choose_k_by_dbi_many(problems)
            same = all(a.k == b.k and a.dbi == b.dbi and np.array_equal(a.labels, b.labels)
                       for a, b in zip(one, many))
            loop = best_of(lambda: [choose_k_by_dbi(p) for p in problems], args.repeats)
            batch = best_of(lambda: choose_k_by_dbi_many(problems), args.repeats)
            print(f"  {lo:2d}-{hi:2d} points x {dim:3d} dims: one at a time {loop:6.2f} s, "
                  f"batched {batch:6.2f} s, ratio {loop / batch:4.1f}x, identical: {same}")


if __name__ == "__main__":
    main()
