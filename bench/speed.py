"""Speed benchmark: s/round of every method on the quickstart against the training floor.

The floor is what training alone costs: the same devices, the same MLP, one model at a time,
one epoch each (``p2pfed.learning.training.train_epochs`` on each device's training data), no
communication, fusion or evaluation. Each method runs the quickstart scenario (its own options
dropped where the method lacks them) through the public runner; s/round is the mean wall time of
the rounds after the first, evaluation rounds included. Everything runs in this one process,
one after the other, so the ratios compare like with like; read them, not the absolute times.

With ``--compare-batched`` each method also runs with ``engine.batched_training=false`` (one
model at a time), right after its batched run, and the line shows both and their ratio.

    python bench/speed.py [--rounds 10] [--methods gossip-avg,fedsub] [--compare-batched] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from round_clock import round_clock  # noqa: E402

from p2pfed.algorithms import ALGORITHMS  # noqa: E402
from p2pfed.engine.runner import run_scenario  # noqa: E402
from p2pfed.learning.model import build_model  # noqa: E402
from p2pfed.learning.training import TrainingConfig, train_epochs  # noqa: E402
from p2pfed.scenario.build import load_scenario_dataset  # noqa: E402
from p2pfed.scenario.loader import LoadedScenario, load_scenario  # noqa: E402


def training_floor(loaded: LoadedScenario, rounds: int) -> float:
    """s/round of one epoch of local training on every device, one model at a time."""
    sc = loaded.scenario
    torch.set_num_threads(sc.engine.torch_threads)
    data = load_scenario_dataset(loaded)
    config = TrainingConfig(**sc.training.model_dump())
    devices = []
    for i, d in enumerate(data.devices):
        model = build_model(data.num_features, data.num_classes, sc.model.hidden, seed=sc.seed)
        devices.append((model, torch.as_tensor(d.x_train, dtype=torch.float32),
                        torch.as_tensor(d.y_train, dtype=torch.int64),
                        torch.Generator().manual_seed(sc.seed * 100_003 + i)))
    ends = []
    for _ in range(rounds):
        for model, x, y, gen in devices:
            train_epochs(model, x, y, config, gen, epochs=1)
        ends.append(time.perf_counter())
    return (ends[-1] - ends[0]) / (len(ends) - 1)


def method_speed(loaded: LoadedScenario) -> float:
    with round_clock() as clock:
        run_scenario(loaded, progress=False)
    return clock.per_round_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=None, help="scenario file (default: the quickstart)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--methods", default=",".join(ALGORITHMS))
    ap.add_argument("--set", action="append", default=[], help="scenario override key=value")
    ap.add_argument("--compare-batched", action="store_true",
                    help="also run each method with engine.batched_training=false")
    args = ap.parse_args()
    if args.rounds < 2:
        ap.error("--rounds must be >= 2 (s/round is measured over the rounds after the first)")
    loaded = load_scenario(args.scenario, [f"rounds={args.rounds}", *args.set])
    sc = loaded.scenario
    print(f"{sc.name}: {args.rounds} rounds, model {sc.model.hidden}, "
          f"torch threads {sc.engine.torch_threads}")
    floor = training_floor(loaded, args.rounds)
    print(f"  {'training floor':16s} {floor:8.3f} s/round   1.00x")
    for name in args.methods.split(","):
        per_round = method_speed(loaded.with_algorithm(name))
        line = f"  {name:16s} {per_round:8.3f} s/round  {per_round / floor:5.2f}x"
        if args.compare_batched:
            one_at_a_time = method_speed(load_scenario(args.scenario, [
                f"rounds={args.rounds}", *args.set, "engine.batched_training=false"]).with_algorithm(name))
            line += (f"   one model at a time: {one_at_a_time:8.3f} s/round  {one_at_a_time / floor:5.2f}x"
                     f"   (batched {one_at_a_time / per_round:4.2f}x faster)")
        print(line, flush=True)
    floor_again = training_floor(loaded, args.rounds)
    print(f"  {'training floor':16s} {floor_again:8.3f} s/round   (again, after the methods: "
          f"the drift between the two is the noise of this run)")


if __name__ == "__main__":
    main()
