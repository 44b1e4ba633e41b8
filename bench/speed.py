"""Speed benchmark: s/round of every method on a scenario against the training floor.

The floor is what training alone costs: the same devices, the same MLP, one model at a time,
one epoch each (``p2pfed.learning.training.train_epochs`` on each device's training data), no
communication, fusion or evaluation. It is measured with one thread and with the run's thread
count (``engine.torch_threads``), and the ratios are taken against the faster of the two, so that
batching wins only what it wins over the best one-at-a-time loop.

Each method runs the scenario (its own options dropped where the method lacks them) through the
public runner; s/round is the mean wall time of the rounds after the first, evaluation rounds
included. Everything runs in this one process, interleaved: each of ``--repeat`` passes measures
the floor, then every method once, so a slower stretch of the machine slows them alike; the
figures are the medians over the passes, and the ratios are medians of each pass's own ratios.
Read the ratios, not the absolute times. ``--out`` writes ``speed.csv`` (one row per method and
pass) and ``summary.csv`` (the medians).

With ``--compare-batched`` each method also runs with ``engine.batched_training=false`` (fusion,
training and evaluation one device at a time), right after its batched run.

    python bench/speed.py [--scenario FILE] [--rounds 20] [--repeat 3] [--methods gossip-avg,fedsub]
                          [--compare-batched] [--set key=value ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import statistics
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
from p2pfed.scenario.loader import load_scenario, with_algorithm  # noqa: E402
from p2pfed.scenario.spec import RunSpec  # noqa: E402
from p2pfed.scenario.threads import apply_torch_threads  # noqa: E402


def training_floor(loaded: RunSpec, rounds: int, threads: int) -> float:
    """s/round of one epoch of local training on every device, one model at a time."""
    sc = loaded.scenario
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        data = loaded.federation
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
    finally:
        torch.set_num_threads(before)


def method_speed(loaded: RunSpec) -> float:
    with round_clock() as clock:
        run_scenario(loaded, progress=False)
    return clock.per_round_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=None, help="scenario file (default: the quickstart)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved passes (medians are reported)")
    ap.add_argument("--methods", default=",".join(ALGORITHMS))
    ap.add_argument("--set", action="append", default=[], help="scenario override key=value")
    ap.add_argument("--compare-batched", action="store_true",
                    help="also run each method with engine.batched_training=false")
    ap.add_argument("--out", type=Path, default=None, help="folder for speed.csv and summary.csv")
    args = ap.parse_args()
    if args.rounds < 2 or args.repeat < 1:
        ap.error("--rounds must be >= 2 (s/round is measured over the rounds after the first), --repeat >= 1")
    loaded = load_scenario(args.scenario, [f"rounds={args.rounds}", *args.set])
    unbatched = load_scenario(args.scenario, [f"rounds={args.rounds}", *args.set, "engine.batched_training=false"])
    sc = loaded.scenario
    threads = apply_torch_threads(sc.engine.torch_threads)
    methods = args.methods.split(",")
    print(f"{sc.name}: {args.rounds} rounds × {args.repeat} passes, model {sc.model.hidden}, "
          f"torch threads {sc.engine.torch_threads} = {threads}", flush=True)
    rows = []
    for rep in range(args.repeat):
        floors = {t: training_floor(loaded, args.rounds, t) for t in sorted({1, threads})}
        floor = min(floors.values())
        for t, f in floors.items():
            rows.append({"pass": rep, "what": f"training floor, {t} thread(s)", "s_per_round": f,
                         "ratio": f / floor})
        for name in methods:
            per_round = method_speed(with_algorithm(loaded, name))
            rows.append({"pass": rep, "what": name, "s_per_round": per_round, "ratio": per_round / floor})
            if args.compare_batched:
                alone = method_speed(with_algorithm(unbatched, name))
                rows.append({"pass": rep, "what": f"{name}, one device at a time", "s_per_round": alone,
                             "ratio": alone / floor})
        print(f"  pass {rep + 1}: floor {floor:.3f} s/round; "
              + ", ".join(f"{r['what']} {r['ratio']:.2f}x" for r in rows if r["pass"] == rep
                          and not r["what"].startswith("training floor")), flush=True)
    summary = []
    for what in dict.fromkeys(r["what"] for r in rows):
        mine = [r for r in rows if r["what"] == what]
        summary.append({"what": what, "s_per_round": statistics.median(r["s_per_round"] for r in mine),
                        "ratio": statistics.median(r["ratio"] for r in mine), "passes": len(mine)})
    print(f"\n  {'':34s} {'s/round':>8s}  ratio to the floor (median of {args.repeat} passes)")
    for s in summary:
        print(f"  {s['what']:34s} {s['s_per_round']:8.3f}  {s['ratio']:5.2f}x")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, table in (("speed.csv", rows), ("summary.csv", summary)):
            with (args.out / name).open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(table[0]))
                writer.writeheader()
                writer.writerows({k: round(v, 5) if isinstance(v, float) else v for k, v in r.items()}
                                 for r in table)


if __name__ == "__main__":
    main()
