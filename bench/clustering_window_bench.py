"""Would batching the K sweeps of devices that act close together pay, over contacts?

In the contact runtime each device clusters its view alone, at its own step. The batched sweep
(``choose_k_by_dbi_many``) stacks problems with the same number of points only (padding would
change the arithmetic, so its result would no longer equal the one-problem path bit for bit). This
bench measures what stacking across devices could still save: it runs
``scenarios/synthetic-rwp-1000.yaml`` until its views have filled (the TTL is an hour), records
the point sets of the next ``--calls`` device steps' sweeps (one call per step, in simulated-time
order), then times them one step at a time and grouped by windows of consecutive steps (about
3.3 steps per simulated second: 1,000 devices every 300 s), reporting CPU ms per device step and
how many stacked groups a step costs.

    python bench/clustering_window_bench.py [--until 4500] [--skip 11000] [--calls 1400]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from p2pfed.cli.main import main as p2pfed_main
from p2pfed.algorithms.fedsub import clustering
from p2pfed.algorithms.fedsub.clustering import choose_k_by_dbi_many

ROOT = Path(__file__).resolve().parents[1]
WINDOWS = (1, 7, 33, 100, 200)   # device steps: ~0.3, 2, 10, 30 and 60 simulated seconds


def record_sweeps(until_s: float, skip: int, calls: int) -> list[tuple[list[np.ndarray], dict]]:
    """The sweeps FedSub asks for after its first ``skip`` ones, from a real run."""
    recorded: list[tuple[list[np.ndarray], dict]] = []
    seen = [0]
    original = clustering.ClusteringCache.cluster_many_later

    def recording(self, point_sets, offload, **params):   # a recording hook, for this bench only
        seen[0] += 1
        if seen[0] > skip and len(recorded) < calls:
            recorded.append(([np.array(p) for p in point_sets], params))
        return original(self, point_sets, offload, **params)

    clustering.ClusteringCache.cluster_many_later = recording
    try:
        with tempfile.TemporaryDirectory() as out:
            p2pfed_main(["run", str(ROOT / "scenarios/synthetic-rwp-1000.yaml"), "--quiet", "--out", out,
                         "--set", f"contacts.duration_s={until_s}", "--set", f"evaluation.every_s={until_s}"])
    finally:
        clustering.ClusteringCache.cluster_many_later = original
    return recorded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--until", type=float, default=4500.0, help="simulated seconds to run")
    ap.add_argument("--skip", type=int, default=11000, help="sweeps to let pass first (views filling)")
    ap.add_argument("--calls", type=int, default=1400, help="device steps' sweeps to time")
    args = ap.parse_args()
    sweeps = record_sweeps(args.until, args.skip, args.calls)
    if not sweeps:
        raise SystemExit("no sweep recorded: raise --until or lower --skip")
    sizes = [p.shape[0] for sets, _ in sweeps for p in sets]
    print(f"{len(sweeps)} device steps, {len(sizes)} class problems; points per problem: mean "
          f"{np.mean(sizes):.1f}, min {min(sizes)}, max {max(sizes)}")
    params = sweeps[0][1]
    base = None
    for window in WINDOWS:
        groups, start = 0, time.process_time()
        for i in range(0, len(sweeps), window):
            sets = [p for step, _ in sweeps[i:i + window] for p in step]
            groups += len({p.shape[0] for p in sets})
            choose_k_by_dbi_many(sets, **params)
        per_step = 1000 * (time.process_time() - start) / len(sweeps)
        base = base or per_step
        print(f"window of {window:3d} steps: {per_step:5.2f} CPU ms per device step ({base / per_step:.2f}x), "
              f"{groups / len(sweeps):.2f} stacked groups per step")


if __name__ == "__main__":
    main()
