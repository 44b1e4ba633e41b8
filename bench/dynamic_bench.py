"""Benchmark: data that appears over time (FedSub journal Sec. 4.5), per algorithm, on WISDM.

The quickstart setting (36 WISDM users, small-world graph) with ``dynamic``: 60 % of the devices
hide up to 80 % of their classes at the start and get one back every ``--return-every`` rounds
(the paper: every 50 of 300 rounds; here a shorter run). Each algorithm runs with dynamic data
and, as the reference, with static data; FedSub runs with and without missing-prototype
prediction. Writes the per-round mean macro-F1 and loss of every run to a CSV, and a plot with
the return rounds marked. Runs already in the CSV are kept and not rerun; ``--fresh`` starts over.

Run: python bench/dynamic_bench.py [--rounds 50] [--return-every 10]
"""

from __future__ import annotations

import argparse
import csv
import tempfile
from pathlib import Path

from p2pfed.engine.runner import run_scenario
from p2pfed.results.files import read_csv
from p2pfed.scenario.loader import load_scenario

VARIANTS = {  # label -> overrides of the quickstart (whose algorithm block is fedsub's)
    "fedsub": [],
    "fedsub+predict": ["algorithm.predict_missing=true"],
    "gossip-avg": ["algorithm={name: gossip-avg}"],
    "local": ["algorithm={name: local}"],
}
COLUMNS = ["variant", "data", "round", "f1_macro_mean", "f1_macro_std", "loss_mean"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--return-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "dynamic.csv"))
    parser.add_argument("--fresh", action="store_true", help="ignore runs already in the CSV")
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [] if args.fresh or not out.exists() else list(csv.DictReader(out.open()))
    done = {(r["variant"], r["data"]) for r in rows}
    dynamic = ["dynamic.devices_fraction=0.6", "dynamic.max_removed_fraction=0.8",
               f"dynamic.return_every={args.return_every}"]
    returns: list[int] = []
    for label in args.variants:
        for data in ("dynamic", "static"):
            base = [f"rounds={args.rounds}", "evaluation.every=1", *VARIANTS[label]]
            loaded = load_scenario(None, base + (dynamic if data == "dynamic" else []), seed=args.seed)
            if data == "dynamic":
                returns = [int(r) for r in _return_rounds(loaded)]
            if (label, data) in done:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                s = run_scenario(loaded, Path(tmp), progress=False)
                for r in read_csv(Path(tmp) / "rounds.csv"):
                    rows.append({"variant": label, "data": data, **{k: r[k] for k in COLUMNS[2:]}})
            print(f"{label:15s} {data:8s} final F1 {s['final']['f1_macro_mean']:.3f} "
                  f"({s['wall_time_s']:.0f} s)", flush=True)
            with out.open("w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=COLUMNS)
                writer.writeheader()
                writer.writerows(rows)
    plot(rows, out.with_suffix(".png"), returns)
    print(f"wrote {out} and {out.with_suffix('.png')}")


def _return_rounds(loaded) -> list[int]:
    """1-based rounds at which a hidden class comes back (the rounds.csv numbering)."""
    from p2pfed.scenario.build import build_class_schedule
    sched = build_class_schedule(loaded, loaded.federation)
    return [r + 1 for r in sched.return_rounds(loaded.scenario.rounds)] if sched else []


def plot(rows: list[dict], path: Path, returns: list[int]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_f1, ax_gap) = plt.subplots(1, 2, figsize=(12, 4))
    labels = list(dict.fromkeys(r["variant"] for r in rows))
    for i, label in enumerate(labels):
        series = {d: {int(r["round"]): float(r["f1_macro_mean"]) for r in rows
                      if r["variant"] == label and r["data"] == d} for d in ("dynamic", "static")}
        colour = f"C{i}"
        for d, style in (("dynamic", "-"), ("static", ":")):
            if series[d]:
                ax_f1.plot(list(series[d]), list(series[d].values()), style, color=colour,
                           label=f"{label} ({d})")
        common = sorted(set(series["dynamic"]) & set(series["static"]))
        if common:
            ax_gap.plot(common, [series["static"][r] - series["dynamic"][r] for r in common],
                        color=colour, label=label)
    for ax in (ax_f1, ax_gap):
        for r in returns:
            ax.axvline(r, color="grey", ls="--", lw=0.8)
        ax.grid(alpha=0.3)
        ax.set(xlabel="round (dashed: a hidden class returns)")
    ax_f1.set(ylabel="mean macro-F1 over devices", ylim=(0, 1))
    ax_gap.set(ylabel="F1 drop: static − dynamic")
    ax_f1.legend(fontsize=7, ncol=2)
    ax_gap.legend(fontsize=8)
    fig.suptitle("WISDM, 60 % of devices start without up to 80 % of their classes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
