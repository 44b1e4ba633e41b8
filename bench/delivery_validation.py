"""The simulator's clock against an emulated network (issue 31, goal 3): per link figure, how long a
message takes from its sender's ``sent_at`` to the receiver's intake in the simulator and on real
CURVE peers on the emulated LAN (``p2pfed launch --network emulated``), same scenario, same
message sizes.

Four devices on a complete graph run gossip-avg (every message a whole model of the size given)
for a few paced rounds; every latency x bandwidth pair is one simulated run and one emulated run.
The simulator models connection setup (``topology.setup_round_trips``, ``--setup-round-trips``:
CURVE peers open each link in about 5 round trips); both sides also report the delivery times
less each sender-receiver pair's first message (``comm.delivery_time_after_first_s``), the
steady state apart from the start. Writes ``delivery.csv`` (per pair: bytes per message, the
simulator's and the emulated median and p95 of all messages and after the first, their ratios,
and the 10 % verdicts) and ``delivery.png`` into OUT. Needs root (namespaces):

    sudo python bench/delivery_validation.py OUT [--latency-ms 5,50,200] [--bandwidth-mbps 1,10,100]

With ``--congestion-control reno --slow-start`` the hosts run Reno (as CUBIC, it restarts slow
start after an idle link) and the simulator models that restart (``topology.slow_start``).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
TOLERANCE = 0.10


def overrides(latency_s: float, bandwidth_bps: float, rounds: int, hidden: str) -> list[str]:
    sets = ["dataset.synthetic.num_devices=4", "dataset.synthetic.samples_per_class=12", f"model.hidden={hidden}",
            f"rounds={rounds}", "topology.kind=complete", f"topology.latency_s={latency_s}",
            f"topology.bandwidth_bps={bandwidth_bps}", "algorithm.name=gossip-avg", "engine.round_period_s=30"]
    return [a for s in sets for a in ("--set", s)]


def run(cmd: list[str]) -> dict:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:8])}...: {done.stderr[-2000:]}")
    out = Path(cmd[cmd.index("--out") + 1])
    return json.loads((out / "summary.json").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--latency-ms", default="5,50,200")
    parser.add_argument("--bandwidth-mbps", default="1,10,100")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hidden", default="[64,128]", help="the MLP's hidden sizes: the message size")
    parser.add_argument("--round-period", type=float, default=4.0, help="real peers' round grid, seconds")
    parser.add_argument("--setup-round-trips", type=float, default=5.0,
                        help="the simulator's topology.setup_round_trips (0: links up from the start)")
    parser.add_argument("--framing", action="store_true",
                        help="the simulator's topology.framing: messages take their bytes on the wire")
    parser.add_argument("--slow-start", action="store_true",
                        help="the simulator's topology.slow_start: messages leave in TCP's congestion window")
    parser.add_argument("--congestion-control", metavar="NAME",
                        help="the emulated hosts' TCP congestion control (default: the kernel's), e.g. reno")
    parser.add_argument("--stem", default="delivery", help="output files STEM.csv and STEM.png")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for latency_ms in map(float, args.latency_ms.split(",")):
        for mbps in map(float, args.bandwidth_mbps.split(",")):
            sets = overrides(latency_ms / 1000, mbps * 1e6, args.rounds, args.hidden)
            with tempfile.TemporaryDirectory() as tmp:
                sim = run([sys.executable, "-m", "p2pfed.cli.main", "run", str(SCENARIO), "--quiet",
                           "--out", f"{tmp}/sim", *sets,
                           "--set", f"topology.setup_round_trips={args.setup_round_trips}",
                           "--set", f"topology.framing={str(args.framing).lower()}",
                           "--set", f"topology.slow_start={str(args.slow_start).lower()}"])
                emu = run([sys.executable, "-m", "p2pfed.cli.main", "launch", str(SCENARIO), "--network", "emulated",
                           "--round-period", str(args.round_period), "--out", f"{tmp}/emu", *sets,
                           *(["--congestion-control", args.congestion_control] if args.congestion_control else [])])
            row = {"latency_ms": latency_ms, "bandwidth_mbps": mbps,
                   "bytes_per_message": sim["comm"]["bytes_per_message"],
                   "setup_round_trips": args.setup_round_trips, "framing": args.framing,
                   "slow_start": args.slow_start, "congestion_control": emu["runtime"]["network"]["congestion_control"]}
            for key, label in (("delivery_time_s", ""), ("delivery_time_after_first_s", "steady_")):
                s, e = sim["comm"][key], emu["comm"][key]
                row |= {f"{label}sim_median_s": s["median"], f"{label}emulated_median_s": e["median"],
                        f"{label}sim_p95_s": s["p95"], f"{label}emulated_p95_s": e["p95"],
                        f"{label}emulated_max_s": e["max"], f"{label}emulated_count": e["count"],
                        f"{label}median_ratio": round(e["median"] / s["median"], 4),
                        f"{label}p95_ratio": round(e["p95"] / s["p95"], 4)}
                row[f"{label}within_10pct"] = (abs(row[f"{label}median_ratio"] - 1) <= TOLERANCE
                                               and abs(row[f"{label}p95_ratio"] - 1) <= TOLERANCE)
            rows.append(row)
            print(json.dumps(row), flush=True)
    with (out / f"{args.stem}.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, label, title in ((axes[0], "", "every message"), (axes[1], "steady_", "after each link's first")):
        for mbps in sorted({r["bandwidth_mbps"] for r in rows}):
            sel = [r for r in rows if r["bandwidth_mbps"] == mbps]
            ax.plot([r["latency_ms"] for r in sel], [r[f"{label}median_ratio"] for r in sel], "o-",
                    label=f"{mbps:g} Mbit/s median")
            ax.plot([r["latency_ms"] for r in sel], [r[f"{label}p95_ratio"] for r in sel], "x--",
                    label=f"{mbps:g} Mbit/s p95")
        ax.axhspan(1 - TOLERANCE, 1 + TOLERANCE, color="0.9", label="within 10 %")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("link latency (ms)")
    axes[0].set_ylabel("emulated / simulated delivery time")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / f"{args.stem}.png", dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
