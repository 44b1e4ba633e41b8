"""Per-call cost of macro-F1 + accuracy: scikit-learn vs p2pfed.learning.metrics, side by side.

Measures one device at a time (what ``evaluate`` does: ~30 test samples, 6 classes) and all
devices in one call (``metrics_many``), and prints the ratios. Absolute times depend on the
machine and its load; the ratios are what to read.

    python bench/metrics_bench.py [--devices 500] [--samples 30] [--classes 6]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.metrics import f1_score

from p2pfed.learning.metrics import macro_f1_accuracy, metrics_many


def best_of(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=500)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--classes", type=int, default=6)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    pairs = [(rng.integers(0, args.classes, args.samples), rng.integers(0, args.classes, args.samples))
             for _ in range(args.devices)]

    def sklearn_loop() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for t, p in pairs:
                f1_score(t, p, average="macro", zero_division=0)
                float((t == p).mean())

    def fast_loop() -> None:
        for t, p in pairs:
            macro_f1_accuracy(t, p)

    ref = best_of(sklearn_loop, 3)
    loop = best_of(fast_loop)
    many = best_of(lambda: metrics_many(pairs))
    n = args.devices
    print(f"{n} devices x {args.samples} samples, {args.classes} classes")
    print(f"  sklearn f1_score per device : {ref / n * 1e6:8.1f} us/device")
    print(f"  macro_f1_accuracy per device: {loop / n * 1e6:8.1f} us/device  ({ref / loop:5.1f}x faster)")
    print(f"  metrics_many, all at once   : {many / n * 1e6:8.1f} us/device  ({ref / many:5.1f}x faster)")


if __name__ == "__main__":
    main()
