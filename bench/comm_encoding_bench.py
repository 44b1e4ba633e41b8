"""Benchmark: FedSub bytes per message as a multiple of the full model, per extraction and wire precision.

Runs the quickstart setting (36 WISDM users, small-world graph) for every extraction rule
(naive, lrp-a1b0, lrp-a2b1) at each wire precision (``engine.precision`` float32 and float16,
every tensor and the full-model yardstick alike, so each ratio compares equal precisions), for
each seed, and writes one row per run to a CSV: bytes per message / full-model message (what one
device sends per round, union encoding), the journal's accounting of the same subnetworks (each
class's subnetwork counted on its own, ``subnet_message_bytes_paper_style``, Fig. 6) / full model
(both float32; float32 rows only), bytes per device per round / full model (all neighbours counted), and the final
mean macro-F1. Rows already in the CSV are kept and not rerun (so a long sweep can be run in
pieces); rows of the format before issue 30 (FedSub's own float16 option, against a float32
yardstick) are dropped; ``--fresh`` starts over.

Run: python bench/comm_encoding_bench.py [--rounds 30] [--seeds 7 8]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from p2pfed.engine.runner import run_scenario
from p2pfed.scenario.loader import load_scenario

EXTRACTIONS = ("naive", "lrp-a1b0", "lrp-a2b1")
COLUMNS = ["extraction", "precision", "seed", "rounds", "bytes_per_message_vs_full_model",
           "paper_style_vs_full_model", "bytes_per_device_per_round_vs_full_model", "bytes_per_message",
           "full_model_bytes", "f1_macro_mean", "f1_macro_std", "wall_time_s"]
PRECISIONS = ("float32", "float16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[7, 8])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "comm_encoding.csv"))
    parser.add_argument("--fresh", action="store_true", help="ignore rows already in the CSV")
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [] if args.fresh or not out.exists() else list(csv.DictReader(out.open()))
    rows = [r for r in rows if r.get("precision")]
    done = {(r["extraction"], r["precision"], r["seed"], r["rounds"]) for r in rows}
    for seed in args.seeds:
        for extraction in EXTRACTIONS:
            for precision in PRECISIONS:
                key = (extraction, precision, str(seed), str(args.rounds))
                if key in done:
                    continue
                loaded = load_scenario(None, [f"rounds={args.rounds}", f"algorithm.extraction={extraction}",
                                              f"engine.precision={precision}",
                                              f"evaluation.every={args.rounds}"], seed=seed)
                s = run_scenario(loaded, progress=False)
                comm, final = s["comm"], s["final"]
                paper_style = s["algorithm_stats"]["subnet_message_bytes_paper_style"]   # at float32
                rows.append({"extraction": extraction, "precision": precision, "seed": seed, "rounds": args.rounds,
                             **{k: comm[k] for k in COLUMNS if k in comm},
                             "paper_style_vs_full_model": (round(paper_style / comm["full_model_bytes"], 4)
                                                           if precision == "float32" else ""),
                             "f1_macro_mean": final["f1_macro_mean"], "f1_macro_std": final["f1_macro_std"],
                             "wall_time_s": s["wall_time_s"]})
                print(f"{extraction:9s} {precision} seed={seed}: "
                      f"{comm['bytes_per_message_vs_full_model']:.3f}x full model per message, "
                      f"F1 {final['f1_macro_mean']:.3f} ({s['wall_time_s']:.0f} s)", flush=True)
                with out.open("w", newline="") as fh:
                    writer = csv.DictWriter(fh, fieldnames=COLUMNS)
                    writer.writeheader()
                    writer.writerows(rows)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
