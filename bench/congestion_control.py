"""Why a message on a fast emulated link takes longer than latency + bytes / bandwidth (issue 31):
the hosts' TCP congestion control, measured on plain TCP and set against the simulator's models.

One sender and one receiver on the emulated LAN (``p2pfed.network.lan``), one link of each
latency x bandwidth; the sender writes a message of each size every ``--gap`` seconds on one TCP
connection (the link idle in between, as between rounds), stamped with its send time; the receiver
notes when its last byte arrived. Once with the kernel's default congestion control (which
namespaces inherit), then with each of ``--also`` (default Reno and CUBIC), set on the
sender's socket before it connects (``TCP_CONGESTION``; root may choose any algorithm the kernel
has). Each message's delivery time is set against the simulator's plain model
(``latency + 8 * bytes / bandwidth``) and its slow-start term (``p2pfed.network.slow_start``,
``topology.slow_start``), the window carried from message to message as the simulator carries
it. Writes ``congestion.csv`` into OUT. Needs root (namespaces):

    sudo python bench/congestion_control.py OUT [--latency-ms 50,200] [--bandwidth-mbps 10,100]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
from pathlib import Path

from p2pfed.network.lan import EmulatedLan, congestion_controls
from p2pfed.network.linkemu import LinkModel
from p2pfed.network.slow_start import Window, send

TOLERANCE = 0.10
HEADER = 12   # the bench's own framing: send time (double) and length (uint32)
RECEIVER = """import socket, struct, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 9000)); s.listen()
c, _ = s.accept(); buf = b''
while (d := c.recv(1 << 20)):
    buf += d
    while len(buf) >= 12 and len(buf) >= 12 + struct.unpack('!dI', buf[:12])[1]:
        t, n = struct.unpack('!dI', buf[:12]); print(time.time() - t, flush=True); buf = buf[12 + n:]
"""
SENDER = """import socket, struct, time
for _ in range(100):
    s = socket.socket()
    if {wanted!r}:   # before connecting: a socket switched later keeps its first algorithm's pacing
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, {wanted!r}.encode())
    try:
        s.connect(('{address}', 9000)); break
    except OSError:
        s.close(); time.sleep(0.1)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b'\\0').decode(), flush=True)
time.sleep(1)
for _ in range({count}):
    s.sendall(struct.pack('!dI', time.time(), {size}) + b'x' * {size}); time.sleep({gap})
s.close()
"""


def measure(latency_s: float, bandwidth_bps: float, size: int, count: int, gap_s: float,
            congestion_control: str | None) -> tuple[str, list[float]]:
    """(the sender's congestion control, each message's delivery time) on one emulated link."""
    link = LinkModel(latency_s=latency_s, bandwidth_bps=bandwidth_bps)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with EmulatedLan(2, {(0, 1): link, (1, 0): link}, folder / "net") as lan:
            with (folder / "r.log").open("wb") as r_log, (folder / "s.log").open("wb") as s_log:
                receiver = lan.spawn(1, [sys.executable, "-c", RECEIVER], log=r_log)
                sender = lan.spawn(0, [sys.executable, "-c", SENDER.format(
                    address=lan.addresses[1], count=count, size=size, gap=gap_s, wanted=congestion_control or "")],
                    log=s_log)
                if sender.wait(timeout=60 + count * gap_s * 2) != 0 or receiver.wait(timeout=60) != 0:
                    raise RuntimeError((folder / "s.log").read_text() + (folder / "r.log").read_text())
        return (folder / "s.log").read_text().split()[0], [float(x) for x in (folder / "r.log").read_text().split()]


def slow_start_model(latency_s: float, bandwidth_bps: float, size: int, count: int, gap_s: float) -> list[float]:
    """The simulator's delivery time of each message with ``topology.slow_start``."""
    window, times = Window(), []
    for k in range(count):
        start = k * gap_s
        times.append(send(window, start, size + HEADER, bandwidth_bps, 2 * latency_s) - start + latency_s)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--latency-ms", default="50,200")
    parser.add_argument("--bandwidth-mbps", default="10,100")
    parser.add_argument("--sizes", default="15000,41652,160000", help="message sizes, bytes")
    parser.add_argument("--count", type=int, default=6, help="messages per cell (the first two are left out)")
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between messages (the link idle)")
    parser.add_argument("--also", default="reno,cubic", help="congestion controls to run besides the kernel's default")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    default, _ = congestion_controls()
    rows = []
    for latency_ms in map(float, args.latency_ms.split(",")):
        for mbps in map(float, args.bandwidth_mbps.split(",")):
            for size in map(int, args.sizes.split(",")):
                latency, bandwidth = latency_ms / 1000, mbps * 1e6
                plain = latency + 8 * (size + HEADER) / bandwidth
                modelled = statistics.median(slow_start_model(latency, bandwidth, size, args.count, args.gap)[2:])
                for wanted in (None, *args.also.split(",")):
                    used, times = measure(latency, bandwidth, size, args.count, args.gap, wanted)
                    measured = statistics.median(times[2:])
                    row = {"latency_ms": latency_ms, "bandwidth_mbps": mbps, "bytes": size,
                           "congestion_control": used, "kernel_default": used == default and wanted is None,
                           "messages": len(times), "measured_median_s": round(measured, 4),
                           "plain_model_s": round(plain, 4), "slow_start_model_s": round(modelled, 4),
                           "ratio_to_plain": round(measured / plain, 3),
                           "ratio_to_slow_start": round(measured / modelled, 3),
                           "within_10pct_plain": abs(measured / plain - 1) <= TOLERANCE,
                           "within_10pct_slow_start": abs(measured / modelled - 1) <= TOLERANCE,
                           "all_s": " ".join(f"{t:.4f}" for t in times)}
                    rows.append(row)
                    print(row, flush=True)
    with (out / "congestion.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
