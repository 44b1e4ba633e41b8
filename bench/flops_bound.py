"""A round's cost against the FLOPs bound of its training, on the machine this runs on.

The bound is the time the round's training arithmetic alone would take at this machine's
measured matrix-product rate:

    bound_s = training FLOPs per round / sgemm rate
    training FLOPs per round = sum over devices of 6 * MACs * train samples * epochs * participation

where MACs is one sample's forward multiply-adds (``p2pfed.energy.work.forward_macs``: the sum of
in x out over the model's Linear layers; 6 = 2 FLOPs per multiply-add x 3 for forward and
backward). The rate is the best of ``torch.matmul`` on float32 square matrices (256, 512, 1024)
and on the model's own layer shapes batched over every device (the batch size x in @ in x out
products a round's batched training does), with the run's thread count. The same bound serves
every method: each trains every device on its samples once per epoch.

Each method runs the scenario (default: the quickstart, the file ``p2pfed run`` runs) through
the public runner; its round time is the mean of the rounds after the first (evaluation rounds
included), as wall time and as the process's CPU time. "training alone" is the devices' batched
training by itself (``train_jobs``, one epoch per device per round, no messages, fusion or
evaluation): what of a round is the training's own, and what the runtime adds. CPU time does not grow when other jobs
share the cores, so on a busy machine read the CPU ratio, with ``engine.torch_threads=1`` (one
thread: CPU time is then the work, without OpenMP's waiting). Passes interleave the rate and the
methods, and the figures are medians over the passes.

    python bench/flops_bound.py [--scenario FILE] [--rounds 10] [--repeat 3]
                                [--methods gossip-avg,fedsub] [--set key=value ...] [--out FILE.csv]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from round_clock import round_clock  # noqa: E402

from p2pfed.energy.work import FLOPS_PER_MAC, TRAINING_PER_FORWARD, forward_macs  # noqa: E402
from p2pfed.engine.runner import run_scenario  # noqa: E402
from p2pfed.learning.batched_training import TrainingJob, train_jobs  # noqa: E402
from p2pfed.learning.training import TrainingConfig  # noqa: E402
from p2pfed.scenario.build import build_device_model  # noqa: E402
from p2pfed.scenario.loader import load_scenario, with_algorithm  # noqa: E402
from p2pfed.scenario.spec import RunSpec  # noqa: E402
from p2pfed.scenario.threads import apply_torch_threads  # noqa: E402

SQUARE_SIZES = (256, 512, 1024)
MIN_TIMED_S = 0.2


def training_flops_per_round(loaded: RunSpec) -> tuple[float, list[tuple[int, int]]]:
    """The round's training FLOPs (module doc) and the model's Linear shapes (in, out)."""
    sc, data = loaded.scenario, loaded.federation
    model = build_device_model(loaded, data.num_features, data.num_classes)
    macs = forward_macs(model, data.num_features)
    samples = sum(len(d.y_train) for d in data.devices)
    flops = TRAINING_PER_FORWARD * FLOPS_PER_MAC * macs * samples * sc.training.epochs * sc.engine.participation
    shapes = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return flops, shapes


def _rate(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """FLOP/s of ``a @ b`` per wall second and per CPU second (best of a few timed batches)."""
    flops = 2.0 * a.shape[-2] * a.shape[-1] * b.shape[-1] * (a.shape[0] if a.dim() == 3 else 1)
    out = torch.matmul(a, b)
    best_wall = best_cpu = 0.0
    for _ in range(3):
        n, w0, c0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - w0 < MIN_TIMED_S:
            torch.matmul(a, b, out=out)
            n += 1
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        best_wall = max(best_wall, n * flops / wall)
        best_cpu = max(best_cpu, n * flops / max(cpu, 1e-9))
    return best_wall, best_cpu


def sgemm_rate(shapes: list[tuple[int, int]], devices: int, batch: int) -> tuple[float, float]:
    """The best float32 matrix-product rate (wall, CPU) over square and the model's own shapes."""
    gen = torch.Generator().manual_seed(0)
    cases = [(torch.rand(n, n, generator=gen), torch.rand(n, n, generator=gen)) for n in SQUARE_SIZES]
    cases += [(torch.rand(devices, batch, i, generator=gen), torch.rand(devices, i, o, generator=gen))
              for i, o in shapes]
    rates = [_rate(a, b) for a, b in cases]
    return max(r[0] for r in rates), max(r[1] for r in rates)


def batched_training_round(loaded: RunSpec, rounds: int) -> tuple[float, float]:
    """Mean (wall, CPU) seconds per round of the devices' training alone, batched as a round
    trains them (``train_jobs``: one epoch each), without messages, fusion or evaluation."""
    sc, data = loaded.scenario, loaded.federation
    config = TrainingConfig(**sc.training.model_dump())
    jobs = [TrainingJob(build_device_model(loaded, data.num_features, data.num_classes),
                        torch.as_tensor(d.x_train, dtype=torch.float32), torch.as_tensor(d.y_train, dtype=torch.int64),
                        config, torch.Generator().manual_seed(sc.seed * 100_003 + i))
            for i, d in enumerate(data.devices)]
    walls, cpus = [], []
    for _ in range(rounds):
        train_jobs(jobs)
        walls.append(time.perf_counter())
        cpus.append(time.process_time())
    return (walls[-1] - walls[0]) / (rounds - 1), (cpus[-1] - cpus[0]) / (rounds - 1)


def method_round(loaded: RunSpec) -> tuple[float, float]:
    """Mean (wall, CPU) seconds of the rounds after the first."""
    with round_clock() as clock:
        run_scenario(loaded, progress=False)
    return clock.per_round_s, clock.cpu_per_round_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=None, help="scenario file (default: the quickstart)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved passes (medians are reported)")
    ap.add_argument("--methods", default="gossip-avg,fedsub")
    ap.add_argument("--set", action="append", default=[], help="scenario override key=value")
    ap.add_argument("--out", type=Path, default=None, help="CSV of every pass's figures")
    args = ap.parse_args()
    if args.rounds < 2 or args.repeat < 1:
        ap.error("--rounds must be >= 2 (rounds after the first are timed), --repeat >= 1")
    loaded = load_scenario(args.scenario, [f"rounds={args.rounds}", *args.set])
    sc = loaded.scenario
    threads = apply_torch_threads(sc.engine.torch_threads)
    flops, shapes = training_flops_per_round(loaded)
    devices = len(loaded.federation.devices)
    print(f"{sc.name}: {devices} devices, model {sc.model.hidden}, torch threads {threads}; training "
          f"{flops / 1e9:.3f} GFLOP per round; {args.rounds} rounds x {args.repeat} passes", flush=True)
    rows: list[dict[str, Any]] = []
    for rep in range(args.repeat):
        wall_rate, cpu_rate = sgemm_rate(shapes, devices, sc.training.batch_size)
        rows.append({"pass": rep, "what": "sgemm", "wall_s": flops / wall_rate, "cpu_s": flops / cpu_rate,
                     "gflops_wall": wall_rate / 1e9, "gflops_cpu": cpu_rate / 1e9})
        for name in ["training alone", *args.methods.split(",")]:
            wall, cpu = (batched_training_round(loaded, args.rounds) if name == "training alone"
                         else method_round(with_algorithm(loaded, name)))
            rows.append({"pass": rep, "what": name, "wall_s": wall, "cpu_s": cpu,
                         "x_bound_wall": wall * wall_rate / flops, "x_bound_cpu": cpu * cpu_rate / flops})
        print("  pass", rep + 1, "; ".join(f"{r['what']} {r['wall_s']:.4f} s wall, {r['cpu_s']:.4f} s CPU"
                                          for r in rows if r["pass"] == rep), flush=True)
    print(f"\n  {'':14s} {'wall s':>8s} {'CPU s':>8s} {'x bound (wall)':>15s} {'x bound (CPU)':>14s}   "
          f"(medians of {args.repeat} passes; sgemm: the bound)")
    for what in dict.fromkeys(r["what"] for r in rows):
        mine = [r for r in rows if r["what"] == what]
        med = {k: statistics.median(float(r.get(k, 1.0)) for r in mine)
               for k in ("wall_s", "cpu_s", "x_bound_wall", "x_bound_cpu")}
        extra = (f"  at {statistics.median(r['gflops_wall'] for r in mine):.0f} GFLOP/s wall, "
                 f"{statistics.median(r['gflops_cpu'] for r in mine):.0f} per CPU second" if what == "sgemm" else "")
        print(f"  {what:14s} {med['wall_s']:8.4f} {med['cpu_s']:8.4f} {med['x_bound_wall']:14.1f}x "
              f"{med['x_bound_cpu']:13.1f}x{extra}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        fields = list(dict.fromkeys(k for r in rows for k in r))
        with args.out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows({k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()} for r in rows)


if __name__ == "__main__":
    main()
