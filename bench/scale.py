"""Scale benchmark: s/round and peak memory of a synthetic federation from 36 to 10,000 devices.

The federation of issue 12: every device holds 43 features and 6 classes, 25 samples per class
(150 samples, a quarter kept for testing), devices linked by a random-regular graph of degree 6;
the rest is ``scenarios/synthetic-small.yaml`` (model, training, seed) unless ``--set`` changes
it. Each (method, device count) runs in its own subprocess through the public runner
(``load_scenario`` + ``run_scenario``), so its peak RSS (``ru_maxrss``) is its own. A run that
fails (a resource limit, a crash, ``--timeout``) becomes a row with its error, not a crash of
the sweep. Writes ``scale.csv`` and ``scale.png`` into ``--out``.

s/round is the mean wall time of the rounds after the first (evaluation every round included);
``first_round_s`` is the time to the end of round 1 (data, models, sockets, then round 1).
``estimated_mib`` is what ``p2pfed.engine.footprint`` predicted for the run before it started,
beside the peak RSS measured: the calibration of the memory refusal.

    python bench/scale.py --devices 36,100,300,1000,3000,10000 --methods gossip-avg,fedsub \\
        --rounds 10 --out bench/results/scale
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "synthetic-small.yaml"
COLUMNS = ["method", "devices", "rounds", "s_per_round", "first_round_s", "total_s", "peak_rss_mib",
           "estimated_mib", "f1_final", "error"]


def federation_overrides(devices: int, rounds: int) -> list[str]:
    return [f"dataset.synthetic.num_devices={devices}", "dataset.synthetic.num_classes=6",
            "dataset.synthetic.num_features=43", "dataset.synthetic.samples_per_class=25",
            "topology.kind=random-regular", "topology.degree=6", f"rounds={rounds}",
            "evaluation.every=1"]


def worker(args: argparse.Namespace) -> None:
    """One run in this process; prints its row as JSON on the last line."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from round_clock import round_clock

    from p2pfed.engine.runner import run_scenario
    from p2pfed.scenario.loader import load_scenario, with_algorithm

    from p2pfed.engine import runner

    estimates = []   # what engine/footprint.py predicted, beside the peak RSS measured (calibration)
    check = runner.check_memory
    runner.check_memory = lambda *a, **k: estimates.append(check(*a, **k)) or estimates[-1]
    loaded = load_scenario(SCENARIO, federation_overrides(args.worker, args.rounds) + args.set)
    loaded = with_algorithm(loaded, args.worker_method)
    t0 = time.perf_counter()
    with round_clock() as clock:
        summary = run_scenario(loaded, progress=False)
    total = time.perf_counter() - t0
    row = {"method": args.worker_method, "devices": args.worker, "rounds": args.rounds,
           "s_per_round": round(clock.per_round_s, 4), "first_round_s": round(clock.first_round_s, 2),
           "total_s": round(total, 2),
           "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "estimated_mib": round(estimates[-1].total_bytes / 2**20, 1) if estimates else "",
           "f1_final": summary["final"]["f1_macro_mean"], "error": ""}
    print(json.dumps(row))


def run_one(method: str, devices: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--worker", str(devices), "--worker-method", method,
           "--rounds", str(args.rounds)] + [x for s in args.set for x in ("--set", s)]
    failed = {"method": method, "devices": devices, "rounds": args.rounds}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {**failed, "error": f"timeout after {args.timeout} s"}
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        return {**failed, "error": (lines[-1] if lines else f"exit code {proc.returncode}")[:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    for method in dict.fromkeys(r["method"] for r in rows):
        ok = [r for r in rows if r["method"] == method and not r.get("error")]
        bad = [r for r in rows if r["method"] == method and r.get("error")]
        line, = ax_t.plot([r["devices"] for r in ok], [r["s_per_round"] for r in ok], "o-", label=method)
        ax_m.plot([r["devices"] for r in ok], [r["peak_rss_mib"] / 1024 for r in ok], "o-", label=method)
        for r in bad:  # a dotted line where a run failed, with the first words of its error
            for ax in (ax_t, ax_m):
                ax.axvline(r["devices"], color=line.get_color(), ls=":", lw=1)
                ax.text(r["devices"], 0.98, f"{method} failed: {r['error'][:40]}", rotation=90,
                        fontsize=6, va="top", ha="right", color=line.get_color(),
                        transform=ax.get_xaxis_transform())
    ax_t.set(xscale="log", xlabel="devices", ylabel="s / round", title="time per round")
    if any(not r.get("error") for r in rows):
        ax_t.set_yscale("log")
    ax_m.set(xscale="log", xlabel="devices", ylabel="peak RSS (GiB)", title="peak memory")
    ax_m.set_ylim(bottom=0)
    for ax in (ax_t, ax_m):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="36,100,300,1000,3000,10000")
    ap.add_argument("--methods", default="gossip-avg,fedsub")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--set", action="append", default=[], help="extra scenario override key=value")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    ap.add_argument("--out", type=Path, default=Path("bench/results/scale"))
    ap.add_argument("--title", default="")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--worker-method", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rounds < 2:
        ap.error("--rounds must be >= 2 (s/round is measured over the rounds after the first)")
    if args.worker is not None:
        worker(args)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for method in args.methods.split(","):
        for devices in (int(d) for d in args.devices.split(",")):
            row = run_one(method, devices, args)
            rows.append(row)
            shown = row.get("error") or (f"{row['s_per_round']:.3f} s/round, to round 1 {row['first_round_s']} s, "
                                         f"peak {row['peak_rss_mib']:.0f} MiB")
            print(f"{method:12s} {devices:6d} devices: {shown}", flush=True)
            with open(args.out / "scale.csv", "w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=COLUMNS)
                w.writeheader()
                w.writerows({k: r.get(k, "") for k in COLUMNS} for r in rows)
    title = args.title or f"synthetic federation (43 features, 6 classes, degree 6), {args.rounds} rounds"
    plot(rows, args.out / "scale.png", title)


if __name__ == "__main__":
    main()
