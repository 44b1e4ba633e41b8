"""Late artifacts, simulator against real peers (issue 31, goal 3): with a round period short enough
that the artifacts of some links arrive after the fusion they were shared for, are the same
artifacts fused in each round?

Four devices on a complete graph run gossip-avg (every message a whole model, ~40 kB); two links
(0-1 and 2-3) are slow enough that their artifacts take more than one round period and less than
two, the other four fast enough to arrive well within it. The simulator (``p2pfed run``,
``engine.round_period_s``; connections are up before the grid starts) and four CURVE
peers on the emulated LAN (``p2pfed launch --network emulated --round-period``, the same topology
file with the same per-link figures) run the same scenario. Reported per device: artifacts
received and late (``comm.messages_late``: arrived after the fusion they were for, fused a round
later), and per round the mean F1, which is the same in both runtimes only if every device fused
the same artifacts in every round (training is deterministic). The real peers run on one shared
grid (``--shared-grid``: round r ends at the same instant on every peer, nobody is waited for,
as in the simulator); the simulator runs with and without ``topology.framing`` (a message's
framing and TCP/IP header bytes on its link). Writes ``late.csv`` (per device), ``rounds.csv``
(per round) and ``summaries/`` into OUT. Needs root (namespaces); about two minutes:

    sudo python bench/late_validation.py OUT [--rounds 8] [--round-period 1.0] [--slow-mbps 0.25]
        [--congestion-control reno] [--slow-start]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
SLOW_LINKS = ((0, 1), (2, 3))


def run(cmd: list[str]) -> tuple[dict, list[dict], list[dict]]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:8])}...: {done.stderr[-2000:]}")
    out = Path(cmd[cmd.index("--out") + 1])
    with (out / "devices.csv").open() as f:
        devices = list(csv.DictReader(f))
    with (out / "rounds.csv").open() as f:
        rounds = list(csv.DictReader(f))
    return json.loads((out / "summary.json").read_text()), devices, rounds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--round-period", type=float, default=1.0, help="seconds, both runtimes")
    parser.add_argument("--slow-mbps", type=float, default=0.25, help="links 0-1 and 2-3")
    parser.add_argument("--fast-mbps", type=float, default=10.0, help="the other links")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="every link")
    parser.add_argument("--hidden", default="[64,128]", help="the MLP's hidden sizes: the message size")
    parser.add_argument("--framing", default="false,true", help="the simulator's topology.framing values to run")
    parser.add_argument("--slow-start", action="store_true",
                        help="the simulator's topology.slow_start: messages leave in TCP's congestion window")
    parser.add_argument("--congestion-control", metavar="NAME",
                        help="the emulated hosts' TCP congestion control (default: the kernel's), e.g. reno")
    args = parser.parse_args()
    out = Path(args.out)
    (out / "summaries").mkdir(parents=True, exist_ok=True)
    topology = out / "topology.edgelist"
    topology.write_text("".join(
        f"{a} {b} {(args.slow_mbps if (a, b) in SLOW_LINKS else args.fast_mbps) * 1e6} {args.latency_ms / 1000}\n"
        for a in range(4) for b in range(a + 1, 4)))
    sets = [a for s in ["dataset.synthetic.num_devices=4", "dataset.synthetic.samples_per_class=12",
                        f"model.hidden={args.hidden}", f"rounds={args.rounds}", "topology.kind=file",
                        f"topology.file={topology}", "algorithm.name=gossip-avg",
                        f"engine.round_period_s={args.round_period}"] for a in ("--set", s)]
    cli = [sys.executable, "-m", "p2pfed.cli.main"]
    emu, emu_devices, emu_rounds = run(cli + ["launch", str(SCENARIO), "--network", "emulated", "--round-period",
                                              str(args.round_period), "--shared-grid", *sets,
                                              *(["--congestion-control", args.congestion_control]
                                                if args.congestion_control else []),
                                              "--out", str(out / "summaries" / "emulated")])
    device_rows, round_rows, delivery = [], [], {"emulated": emu["comm"]["delivery_time_s"]}
    for framing in args.framing.split(","):
        sim, sim_devices, sim_rounds = run(cli + ["run", str(SCENARIO), "--quiet", *sets, "--set",
                                                  f"topology.framing={framing}", "--set",
                                                  f"topology.slow_start={str(args.slow_start).lower()}",
                                                  "--out", str(out / "summaries" / f"sim-framing-{framing}")])
        delivery[f"sim framing {framing}"] = sim["comm"]["delivery_time_s"]
        for s, e in zip(sim_devices, emu_devices, strict=True):
            row = {"framing": framing, "device": s["device"]}
            for key in ("messages_received", "messages_late"):
                row[f"sim_{key}"], row[f"emulated_{key}"] = int(s[key]), int(e[key])
            row["same"] = all(row[f"sim_{k}"] == row[f"emulated_{k}"] for k in ("messages_received", "messages_late"))
            device_rows.append(row)
        round_rows += [{"framing": framing, "round": s["round"], "sim_f1": s["f1_macro_mean"],
                        "emulated_f1": e["f1_macro_mean"], "same": s["f1_macro_mean"] == e["f1_macro_mean"]}
                       for s, e in zip(sim_rounds, emu_rounds, strict=True)]
    message_s = 8 * emu["comm"]["bytes_per_message"] / (args.slow_mbps * 1e6) + args.latency_ms / 1000
    print(f"a slow link's artifact: {message_s:.3f} s (encoded bytes); round period {args.round_period} s")
    for name, rows in (("late.csv", device_rows), ("rounds.csv", round_rows)):
        with (out / name).open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        for r in rows:
            print(json.dumps(r))
    print(json.dumps({"timed_out": emu.get("runtime", {}).get("timed_out"), "delivery_time_s": delivery,
                      "congestion_control": emu["runtime"]["network"]["congestion_control"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
