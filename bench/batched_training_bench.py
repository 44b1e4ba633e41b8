"""Batched local training against one model at a time, side by side in one process.

For each federation, every device's plain training job (``Algorithm.plain_training_job``, one epoch
as configured) runs once per "round" in three ways, interleaved round by round so that a loaded
machine slows all three alike: one model at a time (``TrainingJob.run``, the loop the runtimes
used before), batched with the MLP's forward as grouped matmuls (``train_jobs``, what the
simulation uses), and batched with ``torch.func.functional_call`` under ``torch.vmap`` (the
library path, kept as the reference; measured slower on CPU). The figures are the median over rounds; read the
ratios, not the absolute times.

Federations: the quickstart (36 WISDM devices, MLP [128, 512]) and the synthetic federation of
issue 12 (``bench/scale.py``: 43 features, 6 classes, ~112 training samples per device, the
synthetic-small model) at ``--devices`` devices.

    python bench/batched_training_bench.py [--rounds 5] [--devices 1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from scale import SCENARIO as SYNTHETIC, federation_overrides  # noqa: E402

from p2pfed.learning.batched_training import TrainingJob, train_group, train_jobs, vmap_forward  # noqa: E402
from p2pfed.scenario.build import build_algorithms, load_scenario_dataset  # noqa: E402
from p2pfed.scenario.loader import load_scenario  # noqa: E402


def jobs_of(scenario: Path | None, overrides: list[str]) -> list[TrainingJob]:
    loaded = load_scenario(scenario, overrides).with_algorithm("local")
    algos = build_algorithms(loaded, load_scenario_dataset(loaded))
    return [a.plain_training_job() for a in algos]


def measure(jobs: list[TrainingJob], rounds: int) -> dict[str, float]:
    ways = {"one model at a time": lambda: [job.run() for job in jobs],
            "batched (bmm)": lambda: train_jobs(jobs),
            "batched (vmap)": lambda: train_group([j for j in jobs if j.x.shape[0]], vmap_forward)}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for name, way in ways.items():   # warm-up: first calls pay lazy imports and allocations
        way()
    for _ in range(rounds):
        for name, way in ways.items():
            t0 = time.perf_counter()
            way()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--devices", type=int, default=1000, help="devices of the synthetic federation")
    args = ap.parse_args()
    torch.set_num_threads(1)   # engine.torch_threads default, as the runtimes train
    federations = {"quickstart (36 WISDM devices)": (None, ["rounds=2"]),
                   f"synthetic ({args.devices} devices)": (SYNTHETIC, federation_overrides(args.devices, 2))}
    for title, (scenario, overrides) in federations.items():
        jobs = jobs_of(scenario, overrides)
        result = measure(jobs, args.rounds)
        base = result["one model at a time"]
        print(f"{title}: median of {args.rounds} rounds, one epoch per device")
        for name, seconds in result.items():
            print(f"  {name:22s} {seconds:8.3f} s/round  {base / seconds:5.2f}x faster than one at a time",
                  flush=True)


if __name__ == "__main__":
    main()
