"""Communication benchmark: one scenario, a sweep of contact intensity, several methods.

For every method and every value of the swept key (e.g. ``contacts.mean_intercontact_s`` or
``contacts.range_m``) it runs the scenario and reports F1 over simulated time, bytes per device,
transfers started / completed / aborted, bytes wasted, delivery ratio and the age of the
artifacts fusions used; a purely local run (no communication) is the floor to compare with.
Writes ``comm_bench.csv``, ``f1_over_time.csv`` and ``comm_bench.png`` into ``--out``.

    python bench/comm_bench.py scenarios/opportunistic-poisson.yaml \\
        --sweep contacts.mean_intercontact_s=300,1200,4800,19200 --algorithms fedsub,gossip-avg
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from p2pfed.engine.runner import run_scenario  # noqa: E402
from p2pfed.results.files import read_csv  # noqa: E402
from p2pfed.scenario.loader import load_scenario  # noqa: E402

COLUMNS = ["algorithm", "sweep_key", "sweep_value", "contacts", "contacts_per_device_per_hour",
           "f1_final", "f1_final_std", "f1_mean_over_time", "bytes_per_device", "bytes_wasted_per_device",
           "transfers_started",
           "transfers_completed", "transfers_aborted", "bytes_wasted", "delivery_ratio",
           "mean_fused_age_s", "trainings_per_device", "wall_time_s"]


def bench_row(algorithm: str, key: str, value: str, summary: dict, rounds: list[dict]) -> dict:
    comm, contacts, asyn = summary["comm"], summary.get("contacts", {}), summary.get("asynchronous", {})
    f1 = [float(r["f1_macro_mean"]) for r in rounds]
    return {"algorithm": algorithm, "sweep_key": key, "sweep_value": value,
            "contacts": contacts.get("contacts"),
            "contacts_per_device_per_hour": contacts.get("contacts_per_device_per_hour"),
            "f1_final": summary["final"]["f1_macro_mean"], "f1_final_std": summary["final"]["f1_macro_std"],
            "f1_mean_over_time": round(sum(f1) / len(f1), 6),
            "bytes_per_device": round(comm["bytes_sent_total"] / summary["devices"]),
            "bytes_wasted_per_device": round(comm["bytes_wasted"] / summary["devices"]),
            **{k: comm[k] for k in ("transfers_started", "transfers_completed", "transfers_aborted",
                                    "bytes_wasted", "delivery_ratio")},
            "mean_fused_age_s": asyn.get("mean_fused_age_s"),
            "trainings_per_device": asyn.get("trainings_per_device"), "wall_time_s": summary["wall_time_s"]}


def plot(rows: list[dict], curves: dict, key: str, path: Path, title: str) -> None:
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax_t, ax_f1, ax_bytes, ax_del = axes.ravel()
    algos = sorted({r["algorithm"] for r in rows if r["sweep_value"] != "-"})
    local = [r for r in rows if r["algorithm"] == "local"]
    for (algo, value), pts in curves.items():
        style = "--" if algo == "gossip-avg" else ":" if algo == "local" else "-"
        ax_t.plot([p[0] for p in pts], [p[1] for p in pts], style, label=f"{algo} {value}")
    ax_t.set(xlabel="simulated time (s)", ylabel="mean macro-F1", title="F1 over time", ylim=(0, 1))
    ax_t.legend(fontsize=6, ncol=2)
    for algo in algos:
        mine = [r for r in rows if r["algorithm"] == algo]
        x = [float(r["contacts_per_device_per_hour"]) for r in mine]
        ax_f1.plot(x, [r["f1_final"] for r in mine], "o-", label=algo)
        ax_bytes.plot(x, [r["bytes_per_device"] / 1e6 for r in mine], "o-", label=f"{algo} sent")
        ax_bytes.plot(x, [r["bytes_wasted_per_device"] / 1e6 for r in mine], "x:", label=f"{algo} wasted")
        ax_del.plot(x, [r["delivery_ratio"] for r in mine], "o-", label=f"{algo} delivery ratio")
    for r in local:
        ax_f1.axhline(r["f1_final"], color="grey", ls=":", label="local (no communication)")
    ax_f1.set(xscale="log", xlabel="contacts per device per hour", ylabel="final mean macro-F1",
              title=f"F1 vs contact intensity ({key})", ylim=(0, 1))
    ax_bytes.set(xscale="log", xlabel="contacts per device per hour", ylabel="MB per device",
                 title="bytes sent / wasted per device")
    ax_del.set(xscale="log", xlabel="contacts per device per hour", ylabel="delivered / started",
               title="delivery ratio", ylim=(0, 1.05))
    for ax in (ax_f1, ax_bytes, ax_del):
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario")
    p.add_argument("--sweep", required=True, metavar="KEY=V1,V2,...", help="scenario key and its values")
    p.add_argument("--algorithms", default="fedsub,gossip-avg")
    p.add_argument("--no-local", action="store_true", help="skip the local (no communication) floor")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.SUB=VALUE")
    p.add_argument("--seed", type=int)
    p.add_argument("--out", default="bench/results/comm")
    args = p.parse_args(argv)
    key, _, values = args.sweep.partition("=")
    values = [v.strip() for v in values.split(",") if v.strip()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, curves = [], {}
    jobs = [(a.strip(), v) for a in args.algorithms.split(",") for v in values]
    if not args.no_local:
        jobs.append(("local", values[0]))   # local ignores contacts: one run is the floor for all
    for algo, value in jobs:
        loaded = load_scenario(args.scenario, [*args.overrides, f"{key}={value}"], args.seed).with_algorithm(algo)
        run_dir = out / "runs" / f"{algo}-{key.split('.')[-1]}-{value}"
        t0 = time.perf_counter()
        summary = run_scenario(loaded, run_dir, progress=False)
        rounds = read_csv(run_dir / "rounds.csv")
        row = bench_row(algo, key, value if algo != "local" else "-", summary, rounds)
        rows.append(row)
        curves[algo, value if algo != "local" else ""] = [(float(r["sim_time_s"]), float(r["f1_macro_mean"]))
                                                          for r in rounds]
        print(f"{algo:10s} {key}={value:>8s}  F1 {row['f1_final']:.3f}  contacts/dev/h "
              f"{row['contacts_per_device_per_hour']}  delivery {row['delivery_ratio']}  "
              f"aborted {row['transfers_aborted']}  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    with (out / "comm_bench.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    with (out / "f1_over_time.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["algorithm", "sweep_value", "sim_time_s", "f1_macro_mean"])
        for (algo, value), pts in curves.items():
            w.writerows([algo, value, t, f] for t, f in pts)
    plot(rows, curves, key, out / "comm_bench.png", title=f"{Path(args.scenario).name}: {key} sweep")
    print(f"results in {out}/ (comm_bench.csv, f1_over_time.csv, comm_bench.png, runs/)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
