"""Synchronous rounds split over Dask workers (``engine.shards``) against one process: the bytes
that cross shards per round, each shard's compute, and the time per round projected on 8 and 64
machines from them with the network model of ``docs/how-to/sharded-run.md``.

The federation is ``bench/scale.py``'s (43 features, 6 classes, 150 samples per device, a
random-regular graph of degree 6) on ``scenarios/synthetic-small.yaml``'s model and training. The
same scenario runs once in this process and once over ``--shards`` worker processes of a local
Dask cluster; both through the public runner, with one torch thread per process
(``engine.torch_threads: 1``, unless ``--set`` says otherwise) so that the comparison is of
processes, not of OpenMP threads on shared cores. s/round is the mean wall time of the rounds
after the first (``bench/round_clock.py``). Writes ``sharded.json`` into ``--out`` and prints a
table.

    python bench/sharded.py --devices 400 --rounds 4 --shards 2 --out bench/results/sharded
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from round_clock import round_clock  # noqa: E402
from scale import SCENARIO, federation_overrides  # noqa: E402

from p2pfed.engine.partition import cut_edges, partition_graph  # noqa: E402
from p2pfed.engine.runner import run_scenario  # noqa: E402
from p2pfed.scenario.loader import load_scenario, with_algorithm  # noqa: E402
from p2pfed.scenario.randomness import int_seed  # noqa: E402


def timed_run(overrides: list[str], method: str, out: Path) -> tuple[dict, float]:
    """One run through the public runner: its summary and its mean s/round after the first."""
    loaded = with_algorithm(load_scenario(SCENARIO, overrides), method)
    with round_clock() as clock:
        summary = run_scenario(loaded, out, progress=False)
    assert summary is not None
    return summary, clock.per_round_s


def projection(graph, shards: int, sharding: dict, per_round_s: float, seed: int, *, machines: int,
               latency_s: float, bandwidth_bytes_s: float) -> dict:
    """Time per round on ``machines`` machines: the slowest shard's compute at ``devices /
    machines`` devices, the overhead per round measured here, two one-way latencies (the driver's
    call out and its answer back) and the crossing bytes through the driver's link."""
    per_device = max(c / n for c, n in zip(sharding["shard_compute_s_per_round"], sharding["devices_per_shard"]))
    overhead = max(per_round_s - max(sharding["shard_compute_s_per_round"]), 0.0)
    cut_here = cut_edges(graph, partition_graph(graph, shards, seed=seed))
    cut_there = cut_edges(graph, partition_graph(graph, machines, seed=seed))
    crossing = sharding["bytes_across_per_round"] * cut_there / max(cut_here, 1)
    compute = per_device * math.ceil(graph.number_of_nodes() / machines)
    network = 2 * latency_s + crossing / bandwidth_bytes_s
    return {"machines": machines, "cut_edges": cut_there, "bytes_across_per_round": round(crossing),
            "compute_s": round(compute, 4), "overhead_s": round(overhead, 4), "network_s": round(network, 4),
            "s_per_round": round(compute + overhead + network, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--method", default="gossip-avg")
    parser.add_argument("--latency-ms", type=float, default=0.5, help="one-way, driver to a worker")
    parser.add_argument("--bandwidth-gbps", type=float, default=10.0, help="the driver's link")
    parser.add_argument("--set", action="append", default=[], help="more scenario overrides")
    parser.add_argument("--out", type=Path, default=Path("bench/results/sharded"))
    args = parser.parse_args()
    overrides = [*federation_overrides(args.devices, args.rounds), "engine.torch_threads=1", *args.set]
    one, one_s = timed_run(overrides, args.method, args.out / "one")
    split, split_s = timed_run([*overrides, f"engine.shards={args.shards}"], args.method, args.out / "split")
    a, b = (pd.read_csv(args.out / d / "rounds.csv") for d in ("one", "split"))
    loaded = load_scenario(SCENARIO, overrides)
    seed = int_seed(loaded.scenario.seed, "shards") % 2**32
    projected = [projection(loaded.graph, args.shards, split["sharding"], split_s, seed, machines=m,
                            latency_s=args.latency_ms / 1e3, bandwidth_bytes_s=args.bandwidth_gbps * 1e9 / 8)
                 for m in (8, 64)]
    report = {"devices": args.devices, "rounds": args.rounds, "method": args.method, "shards": args.shards,
              "one_process_s_per_round": round(one_s, 4), "sharded_s_per_round": round(split_s, 4),
              "f1_final": [one["final"]["f1_macro_mean"], split["final"]["f1_macro_mean"]],
              "max_f1_difference": float((a["f1_macro_mean"] - b["f1_macro_mean"]).abs().max()),
              "sharding": split["sharding"], "network": {"latency_ms": args.latency_ms,
                                                         "bandwidth_gbps": args.bandwidth_gbps},
              "projected": projected}
    (args.out / "sharded.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"{args.devices} devices, {args.method}: one process {one_s:.3f} s/round, {args.shards} shards "
          f"{split_s:.3f} s/round; {split['sharding']['bytes_across_per_round']:.0f} bytes "
          f"({split['sharding']['messages_across_per_round']:.0f} messages) cross shards per round; "
          f"max |f1 difference| {report['max_f1_difference']:.2g}")
    print(pd.DataFrame(projected).to_string(index=False))


if __name__ == "__main__":
    main()
