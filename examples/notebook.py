"""p2pfed from Python, as in a notebook: run a scenario, read its results as tables, compare
methods, bring your own method, log each evaluation live, and run a small sweep.

    python examples/notebook.py          (from the repository's root; about a minute on 2 cores)

The guard below is what a script needs when p2pfed starts worker processes (a sweep's Dask
workers): they import this file again, and must not run it.
"""

from pathlib import Path

import p2pfed
from p2pfed.results.callbacks import Callback

HERE = Path(__file__).resolve().parent
SCENARIO = HERE.parent / "scenarios" / "synthetic-small.yaml"
OUT = Path("runs") / "notebook"   # where the CLI writes too


class Printer(Callback):
    """Live logging: each evaluation as it completes (an MLflow or W&B logger looks the same)."""

    def on_evaluation(self, row):
        print(f"  round {row['round']:>2}: mean macro-F1 {row['f1_macro_mean']:.3f}")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    # One run: results come back as pandas tables; no files unless out= is given.
    run = p2pfed.run(SCENARIO, algorithm="fedsub", rounds=4, callbacks=[Printer()])
    print(run.rounds[["round", "f1_macro_mean", "bytes_sent_total"]].to_string(index=False))
    print("devices:", len(run.devices), "| K chosen per class:", run.summary["algorithm_stats"]["k_mean"])
    run.plot(OUT / "run.png")

    # A scenario can be a mapping, and overrides are --set's keys.
    mine = {"name": "from-python", "rounds": 3, "dataset": {"name": "synthetic"}, "model": {"hidden": [16]}}
    print("mapping:", p2pfed.run(mine, algorithm="gossip-avg", overrides={"training.lr": 0.1}).f1)

    # A run spec: the scenario checked once, its method resolved, its data read on first use and
    # kept; run it as it is (a change, e.g. another seed, makes a new spec).
    spec = p2pfed.load(SCENARIO, algorithm="local", rounds=2)
    print("run spec:", spec.method.name, "on", len(spec.federation.devices), "devices:", p2pfed.run(spec).f1)

    # Your own method: a class from your own module (here the example of examples/).
    from loss_weighted_gossip import LossWeightedGossip
    print(p2pfed.compare(SCENARIO, ["local", "gossip-avg", LossWeightedGossip], rounds=4)
          [["algorithm", "f1_macro_mean", "bytes_per_device_per_round"]].to_string(index=False))

    # A sweep, shortened from here as --set and --seeds shorten it on the command line.
    sweep_file = HERE.parent / "sweeps" / "synthetic-heterogeneity.yaml"
    table = p2pfed.sweep(sweep_file, OUT / "sweep", overrides=["rounds=2"], seeds=[0], workers=1)
    print(table.iloc[:, :4].to_string(index=False))


if __name__ == "__main__":
    import sys
    sys.path.insert(0, str(HERE))   # the example method's module
    main()
