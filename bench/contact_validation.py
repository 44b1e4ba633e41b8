"""The contact runtime against real peers over contacts (issue 31, goals 2 and 3): the same scenario
run by the simulator (``p2pfed run``) and by CURVE peers on the emulated LAN whose links are up only
during contacts (``p2pfed launch --network emulated --speedup X``), and their transfer counters
compared: transfers started, completed and aborted, bytes wasted, messages and bytes sent.

Two contact sources, eight devices each (synthetic data, FedSub, prototypes and subnetworks sent
part by part, forwarding on): the real SocioPatterns workplace trace (its eight most active ids,
two hours from 08:00 on the third day, its busiest, 20 s windows) and pairwise Poisson contacts
(one hour); each under two link settings: the SocioPatterns scenario's 1 Mbit/s and 50 ms with a
model whose parts take about a second, and 4 kbit/s links with a small model, where the real
protocol's own bytes (connection set-up, summary vectors, acknowledgements) weigh on every
transfer. The simulator runs each setting once per contact protocol model (``contacts.protocol``:
``ideal``, the runtime's default, and ``acknowledged``, real peers' summary vectors,
acknowledgements and framing). Writes ``contacts.csv`` (per setting, counter and protocol model:
simulator, emulated, ratio, within 10 %), ``summaries/`` (every run's results) and ``contacts.png`` into
OUT. Needs root (namespaces); about 40 minutes at the default speed-up:

    sudo python bench/contact_validation.py OUT [--speedup 10] [--sources trace,poisson] [--links 1mbps,4kbps]
        [--protocols ideal,acknowledged]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
TRACE = ROOT / "topologies" / "sociopatterns" / "workplace_InVS15_tij.dat.gz"
TOLERANCE = 0.10
COUNTERS = ("transfers_started", "transfers_completed", "transfers_aborted", "bytes_wasted", "messages_sent",
            "bytes_sent_total")
COMMON = ["dataset.synthetic.num_devices=8", "dataset.synthetic.samples_per_class=16", "algorithm.name=fedsub",
          "asynchronous.train_period_s=300", "evaluation.every_s=600", "forwarding.enabled=true"]
LINKS = {
    # the SocioPatterns scenario's links (1 Mbit/s, 50 ms) and a model whose parts take about a second
    "1mbps": ["model.hidden=[128,512]", "contacts.bandwidth_bps=1e6", "contacts.latency_s=0.05"],
    # links so slow (4 kbit/s) that a small model's parts take seconds: protocol overhead shows
    "4kbps": ["model.hidden=[16,32]", "contacts.bandwidth_bps=4e3", "contacts.latency_s=0.01"],
}
SOURCES = {
    "trace": ["contacts.kind=trace", f"contacts.file={TRACE}", "contacts.format=sociopatterns",
              "contacts.window_s=20", "contacts.nodes=most-active", "contacts.start_s=201600",
              "contacts.duration_s=7200"],
    "poisson": ["contacts.kind=poisson", "contacts.mean_intercontact_s=600", "contacts.mean_duration_s=30",
                "contacts.duration_s=3600"],
}


def run(cmd: list[str], timeout_s: float = 3000) -> dict:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:8])}...: {done.stderr[-2000:]}")
    out = Path(cmd[cmd.index("--out") + 1])
    return json.loads((out / "summary.json").read_text())


def compare(cli: list[str], out: Path, links: str, source: str, speedup: float,
            protocols: list[str]) -> list[dict]:
    """One setting run by real peers and by the simulator under each protocol model: a row per
    counter and model."""
    sets = [a for s in COMMON + LINKS[links] + SOURCES[source] for a in ("--set", s)]
    name = f"{links}-{source}"
    wall_s = 2400 * max(1.0, 10 / speedup)     # the longest setting (two hours) at 10x took 12 minutes
    real = run(cli + ["launch", str(SCENARIO), *sets, "--network", "emulated", "--speedup", str(speedup),
                      "--timeout", str(int(wall_s)), "--out", str(out / "summaries" / f"{name}-emulated")],
               timeout_s=wall_s + 600)
    rows = []
    for protocol in protocols:
        sim = run(cli + ["run", str(SCENARIO), *sets, "--set", f"contacts.protocol={protocol}",
                         "--out", str(out / "summaries" / f"{name}-sim-{protocol}")])
        for counter in COUNTERS:
            a, b = sim["comm"][counter], real["comm"][counter]
            ratio = b / a if a else (1.0 if b == a else float("inf"))
            rows.append({"links": links, "source": source, "counter": counter, "protocol": protocol,
                         "simulator": a, "emulated": b, "ratio": round(ratio, 4),
                         "within_10pct": abs(ratio - 1) <= TOLERANCE})
        rows.append({"links": links, "source": source, "counter": "final_f1", "protocol": protocol,
                     "simulator": sim["final"]["f1_macro_mean"], "emulated": real["final"]["f1_macro_mean"],
                     "ratio": "", "within_10pct": ""})
        rows.append({"links": links, "source": source, "counter": "control_bytes", "protocol": protocol,
                     "simulator": sim["contact_protocol"]["control_bytes"],
                     "emulated": real["runtime"]["contact_protocol"]["control_bytes"], "ratio": "",
                     "within_10pct": ""})
    network = {k: v for k, v in real["runtime"].get("network", {}).items() if k != "links"}
    print(json.dumps({"setting": name, "protocol": real["runtime"].get("contact_protocol"),
                      "timing": real["runtime"].get("contact_timing"), "network": network,
                      "payload_bytes_sent": real["comm"]["bytes_sent_total"]}), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--speedup", type=float, default=10.0, help="simulated seconds per wall-clock second")
    parser.add_argument("--sources", default="trace,poisson")
    parser.add_argument("--links", default="1mbps,4kbps")
    parser.add_argument("--protocols", default="ideal,acknowledged", help="the simulator's contacts.protocol models")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "p2pfed.cli.main"]
    rows = []
    for links in args.links.split(","):
        for source in args.sources.split(","):
            rows += compare(cli, out, links, source, args.speedup, args.protocols.split(","))
    with (out / "contacts.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print(f"{r['links']:6} {r['source']:8} {r['counter']:20} {r['protocol']:13} {r['simulator']:>12} "
              f"{r['emulated']:>12} {r['ratio']!s:>8} {r['within_10pct']}")
    protocols = args.protocols.split(",")
    counted = [r for r in rows if r["counter"] in COUNTERS]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    width = 0.8 / len(protocols)
    for k, protocol in enumerate(protocols):
        mine = [r for r in counted if r["protocol"] == protocol]
        ax.bar([j + k * width for j in range(len(mine))], [r["ratio"] for r in mine], width,
               color=["tab:green" if r["within_10pct"] else "tab:red" for r in mine],
               edgecolor="black", hatch="" if k == 0 else "//", label=f"simulator: {protocol}")
    labels = [f"{r['links']} {r['source']}\n{r['counter'].replace('_', ' ')}" for r in counted
              if r["protocol"] == protocols[0]]
    ax.axhspan(1 - TOLERANCE, 1 + TOLERANCE, color="grey", alpha=0.2, label="within 10 %")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))], labels, rotation=90, fontsize=7)
    ax.set_ylabel("emulated / simulator")
    ax.set_title(f"real peers over contacts (speedup {args.speedup:g}) vs the contact runtime")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "contacts.png", dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
