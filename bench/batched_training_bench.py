"""Batched local training against one model at a time, side by side in one process.

For each federation, every device's plain training job (``Algorithm.training_job()``, one epoch
as configured) runs once per "round" in four ways, interleaved round by round so that a loaded
machine slows them alike: one model at a time (``TrainingJob.run``), batched with autograd over
``torch.func.functional_call`` under ``torch.vmap`` (the library path), batched with autograd over
the MLP's forward as grouped matmuls (``torch.baddbmm``), and batched with the backward written out
and SGD added straight into the weights (``learning/mlp_backprop.py``: what the simulation uses).
The figures are the median over rounds; read the ratios, not the absolute times. Threads as the
simulation uses them (``engine.torch_threads: auto``).

Federations: the quickstart (36 WISDM devices, MLP [128, 512]), the synthetic federation of
issue 12 (``bench/scale.py``: 43 features, 6 classes, ~112 training samples per device, the
synthetic-small model) at ``--devices`` devices, and ``scenarios/digits-cnn.yaml`` (50 devices, the
CNN with batch norm: only one model at a time and the vmap path apply, issue 33 goal 5).

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

from p2pfed.learning.batched_training import TrainingJob, mlp_forward, train_group, vmap_forward  # noqa: E402
from p2pfed.learning.model import MLP  # noqa: E402
from p2pfed.scenario.build import build_algorithms  # noqa: E402
from p2pfed.scenario.loader import load_scenario, with_algorithm  # noqa: E402
from p2pfed.scenario.threads import apply_torch_threads  # noqa: E402


def jobs_of(scenario: Path | None, overrides: list[str]) -> list[TrainingJob]:
    loaded = with_algorithm(load_scenario(scenario, overrides), "local")
    algos = build_algorithms(loaded, loaded.federation)
    return [a.training_job() for a in algos]


def measure(jobs: list[TrainingJob], rounds: int) -> dict[str, tuple[float, float]]:
    """Median (CPU seconds, wall seconds) per round of each way; the order of the ways rotates
    from round to round."""
    with_data = [j for j in jobs if j.x.shape[0]]
    ways = {"one model at a time": lambda: [job.run() for job in jobs],
            "batched, vmap + autograd": lambda: train_group(with_data, vmap_forward)}
    if isinstance(jobs[0].model, MLP):
        ways |= {"batched, bmm + autograd": lambda: train_group(with_data, mlp_forward),
                 "batched, written out": lambda: train_group(with_data)}
    else:   # a model with buffers takes its own path (batch norm's statistics stacked too)
        ways["batched, vmap + autograd"] = lambda: train_group(with_data)
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    wall: dict[str, list[float]] = {name: [] for name in ways}
    for way in ways.values():   # warm-up: first calls pay lazy imports and allocations
        way()
    names = list(ways)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            c0, w0 = time.process_time(), time.perf_counter()
            ways[name]()
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - w0)
    return {name: (statistics.median(cpu[name]), statistics.median(wall[name])) for name in ways}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--devices", type=int, default=1000, help="devices of the synthetic federation")
    ap.add_argument("--only", help="run only the federations whose title contains this")
    args = ap.parse_args()
    apply_torch_threads("auto")   # engine.torch_threads default, as the simulation trains
    federations = {"quickstart (36 WISDM devices)": (None, ["rounds=2"]),
                   f"synthetic ({args.devices} devices)": (SYNTHETIC, federation_overrides(args.devices, 2)),
                   "digits-cnn (50 devices, CNN with batch norm)": (ROOT / "scenarios" / "digits-cnn.yaml",
                                                                     ["rounds=2"])}
    for title, (scenario, overrides) in federations.items():
        if args.only and args.only not in title:
            continue
        jobs = jobs_of(scenario, overrides)
        result = measure(jobs, args.rounds)
        base_cpu, base_wall = result["one model at a time"]
        print(f"{title}: median of {args.rounds} rounds, one epoch per device, {torch.get_num_threads()} threads "
              f"(speed-up over one model at a time, in CPU time and in wall time)")
        for name, (cpu, wall) in result.items():
            print(f"  {name:26s} {cpu:8.3f} CPU s/round {base_cpu / cpu:5.2f}x   "
                  f"{wall:8.3f} wall s/round {base_wall / wall:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
