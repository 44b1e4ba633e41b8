"""The emulated LAN (``launch --network emulated``): the link model alone, then real namespaces.

The namespace tests skip, with the reason, only where namespaces cannot be built (no root). Their
timing checks are lower bounds the emulated links must respect whatever the machine's load (a
link can never be faster than its model), never upper bounds on wall-clock speed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from p2pfed.cli.main import main
from p2pfed.network.lan import EmulatedLan, LanError, congestion_controls, namespaces_alive
from p2pfed.network.linkemu import LinkModel, LinkScheduler, ipv4_addresses

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
SMALL = ["dataset.synthetic.num_devices=8", "dataset.synthetic.samples_per_class=12", "model.hidden=[8,16]",
         "rounds=2", "topology.kind=ring", "topology.latency_s=0.03", "topology.bandwidth_bps=2e6"]


# the link model ------------------------------------------------------------------------------
def test_packets_on_a_link_follow_the_simulators_transfer_model():
    """FIFO serialisation at the link's bandwidth, then its latency: packet k of size s sent at
    once arrives at (k+1) * 8 s / bandwidth + latency, as the simulator's transfer of k+1 packets."""
    sched = LinkScheduler({("a", "b"): LinkModel(latency_s=0.05, bandwidth_bps=1e6)})
    arrivals = [sched.admit("a", "b", 1250, now=10.0) for _ in range(4)]
    assert arrivals == pytest.approx([10.0 + (k + 1) * 0.01 + 0.05 for k in range(4)])
    later = sched.admit("a", "b", 1250, now=20.0)      # an idle link starts afresh
    assert later == pytest.approx(20.06)
    assert sched.admit("b", "a", 100, now=0.0) is None and sched.unlinked == 1   # no such link


def test_loss_queue_limit_and_jitter():
    lossy = LinkScheduler({("a", "b"): LinkModel(0.01, 1e9, loss=0.05)}, random.Random(1))
    kept = sum(lossy.admit("a", "b", 100, now=i * 1e-3) is not None for i in range(20000))
    assert 0.94 < kept / 20000 < 0.96 and lossy.stats()["lost"] == 20000 - kept
    full = LinkScheduler({("a", "b"): LinkModel(0.0, 8e3)}, queue_packets=10)   # 1 ms per byte
    results = [full.admit("a", "b", 1000, now=0.0) for _ in range(12)]
    assert results[10:] == [None, None] and full.stats()["queue_full"] == 2
    assert full.admit("a", "b", 1000, now=1.5) is not None     # the queue drained meanwhile
    jittery = LinkScheduler({("a", "b"): LinkModel(0.05, 1e9, jitter_s=0.04)}, random.Random(2))
    times = [jittery.admit("a", "b", 100, now=i * 1e-3) for i in range(500)]
    assert times == sorted(times)                                  # jitter never reorders
    delays = [t - i * 1e-3 for i, t in enumerate(times)]
    assert min(delays) >= 0.01 - 1e-9 and max(delays) > 0.08


def test_ipv4_addresses_of_a_packet():
    header = bytes([0x45, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2])
    assert ipv4_addresses(header) == ("10.77.0.1", "10.77.0.2")
    assert ipv4_addresses(b"\x60" + bytes(39)) is None       # IPv6 is not routed here


# real namespaces -----------------------------------------------------------------------------
def _python_on(lan: EmulatedLan, host: int, code: str, log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return lan.spawn(host, [sys.executable, "-c", code], log=out)


def test_links_are_shaped_and_unjoined_hosts_cannot_talk(tmp_path, permitted):
    """Hosts 0-1 joined at 50 ms / 2 Mbit/s, host 2 joined to nobody: a connection takes at least
    a round trip, 250 kB at least a second, and host 2 is unreachable."""
    link = LinkModel(latency_s=0.05, bandwidth_bps=2e6)
    with EmulatedLan(3, {(0, 1): link, (1, 0): link}, tmp_path / "net") as lan:
        server = _python_on(lan, 1, "import socket\ns=socket.socket();s.bind(('0.0.0.0',9000));s.listen()\n"
                            "c,_=s.accept();n=0\nwhile (d:=c.recv(65536)):\n n+=len(d)\nprint(n)",
                            tmp_path / "server.log")
        client = _python_on(lan, 0, f"""import socket,time
for _ in range(100):
    try:
        t=time.monotonic();s=socket.create_connection(('{lan.addresses[1]}',9000),timeout=5);connect=time.monotonic()-t;break
    except ConnectionRefusedError:
        time.sleep(0.1)
t=time.monotonic();s.sendall(b'x'*250000);s.shutdown(socket.SHUT_WR);s.recv(1);sent=time.monotonic()-t
try:
    socket.create_connection(('{lan.addresses[2]}',9000),timeout=1);print('REACHED')
except OSError:
    print('unreachable')
print(connect,sent)""", tmp_path / "client.log")
        assert client.wait(timeout=120) == 0 and server.wait(timeout=60) == 0
    out = (tmp_path / "client.log").read_text().split()
    assert out[0] == "unreachable", out
    connect, sent = map(float, out[1:3])
    assert connect >= 0.1 - 1e-3 and sent >= 1.0 + 0.05      # one round trip; 8 * 250 kB / 2 Mbit/s + latency
    assert (tmp_path / "server.log").read_text().split() == ["250000"]
    stats = json.loads((tmp_path / "net" / "network.json").read_text())
    assert stats["links"]["10.77.0.1>10.77.0.2"]["bytes"] > 250000 and stats["unlinked"] >= 1
    assert namespaces_alive(json.loads((tmp_path / "net" / "lan.json").read_text())["namespaces"]) == []


def test_hosts_run_the_congestion_control_asked_for_and_one_a_namespace_may_not_use_is_refused(tmp_path, permitted):
    """Reno and CUBIC restart slow start after idle, BBR does not, so a delivery time depends on
    it (``topology.slow_start``); the kernel's default is what namespaces inherit."""
    default, allowed = congestion_controls()
    link = LinkModel(latency_s=0.001, bandwidth_bps=1e8)
    code = ("import socket\ns=socket.socket()\n"
            "print(s.getsockopt(socket.IPPROTO_TCP,socket.TCP_CONGESTION,16).rstrip(b'\\0').decode())")
    for wanted in (None, "reno"):
        with EmulatedLan(1, {}, tmp_path / f"net-{wanted}", congestion_control=wanted) as lan:
            assert _python_on(lan, 0, code, tmp_path / "cc.log").wait(timeout=30) == 0
            assert lan.congestion_control == (wanted or default)
        assert (tmp_path / "cc.log").read_text().strip() == (wanted or default)
    refused = next(name for name in ("cubic", "bbr", "no-such-algorithm") if name not in allowed.split())
    with pytest.raises(LanError, match=f"congestion control '{refused}': a network namespace may use only"):
        with EmulatedLan(2, {(0, 1): link, (1, 0): link}, tmp_path / "refused", congestion_control=refused):
            pass


def _launch(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "p2pfed.cli.main", "launch", str(SCENARIO), "--network", "emulated",
            "--out", str(out), *[a for o in SMALL for a in ("--set", o)], *extra]


@pytest.mark.slow   # in the slow set .ci/run also runs; the faults tests run three CURVE peers by default
def test_secure_launch_of_eight_peers_on_an_emulated_ring_leaves_nothing(tmp_path, permitted):
    """The default (CURVE) launch, 8 peers on the scenario's ring with 30 ms / 2 Mbit/s links: every
    peer finishes, each message took at least the link's latency, and no namespace is left."""
    out = tmp_path / "run"
    done = subprocess.run(_launch(out, "--round-timeout", "60"), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    runtime, comm = summary["runtime"], summary["comm"]
    assert runtime["kind"] == "emulated" and runtime["secure"] and runtime["network"]["packets"] > 0
    assert runtime["network"]["unlinked"] == 0 and runtime["network"]["lost"] == 0   # a ring: only neighbours talk
    assert summary["topology"] == {"nodes": 8, "edges": 8, "mean_degree": 2.0}
    assert comm["messages_dropped"] == 0 and comm["delivery_time_s"]["count"] == 8 * 2 * 2
    assert comm["delivery_time_s"]["median"] >= 0.03                # never faster than the link
    assert len(list(out.glob("bundle/peer-*/start.sh"))) == 8          # the plan's bundle, run unchanged
    assert namespaces_alive(json.loads((out / "network" / "lan.json").read_text())["namespaces"]) == []


@pytest.mark.slow   # in the slow set .ci/run also runs (about 50 s: one-second links)
def test_curve_peers_connect_and_deliver_over_links_of_one_second(tmp_path, permitted):
    """Four CURVE peers on a complete graph of 1 s / 10 Mbit/s links (a 2 s round trip: TCP's
    handshake, ZeroMQ's greeting and CURVE's handshake each take round trips): every message of
    both rounds arrives, none faster than its link, and every peer finishes."""
    out = tmp_path / "run"
    sets = ["dataset.synthetic.num_devices=4", "dataset.synthetic.samples_per_class=12", "model.hidden=[16]",
            "rounds=2", "topology.kind=complete", "topology.latency_s=1.0", "topology.bandwidth_bps=1e7",
            "algorithm.name=gossip-avg", "engine.round_period_s=30"]
    cmd = [sys.executable, "-m", "p2pfed.cli.main", "launch", str(SCENARIO), "--network", "emulated",
           "--out", str(out), *[a for o in sets for a in ("--set", o)]]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    comm = summary["comm"]
    assert summary["runtime"]["secure"] and summary["runtime"]["timed_out"] == {}
    assert comm["messages_dropped"] == 0 and comm["delivery_time_s"]["count"] == 4 * 3 * 2
    assert comm["delivery_time_s"]["median"] >= 1.0
    assert namespaces_alive(json.loads((out / "network" / "lan.json").read_text())["namespaces"]) == []


@pytest.mark.slow   # a launcher and its peers in namespaces; in the slow set .ci/run runs
def test_a_sigkilled_launcher_leaves_no_namespace_or_process(tmp_path, permitted):
    out = tmp_path / "run"
    launcher = subprocess.Popen(_launch(out, "--insecure"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lan = out / "network" / "lan.json"
    deadline = time.monotonic() + 120
    while not (out / "network" / "linkemu.ready").exists() and time.monotonic() < deadline:
        assert launcher.poll() is None, "the launcher ended before its LAN was built"
        time.sleep(0.05)
    time.sleep(1.0)                           # peers starting in their namespaces
    recorded = json.loads(lan.read_text())
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    deadline = time.monotonic() + 30
    while (alive := namespaces_alive(recorded["namespaces"])) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive == []
    assert not [pid for pid in recorded["pids"] if Path(f"/proc/{pid}").exists()
                and "zombie" not in Path(f"/proc/{pid}/status").read_text()]


def test_without_permission_the_launch_refuses_in_one_line():
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to drop to an unprivileged user")
    unprivileged = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]
    if subprocess.run([*unprivileged, sys.executable, "-c", "import p2pfed"], capture_output=True, cwd="/",
                      timeout=60).returncode != 0:
        pytest.skip(f"an unprivileged user cannot import p2pfed from {ROOT} (a folder above it is not "
                    "readable by others, as `mktemp -d` makes it)")
    with tempfile.TemporaryDirectory() as tmp:     # pytest's folders are root's alone
        os.chmod(tmp, 0o777)
        done = subprocess.run([*unprivileged, *_launch(Path(tmp) / "run")], capture_output=True, text=True,
                              timeout=120, cwd="/")
    assert done.returncode == 1
    line = [x for x in done.stderr.splitlines() if x.startswith("p2pfed:")]
    assert len(line) == 1 and "needs root (CAP_NET_ADMIN" in line[0], done.stderr[-2000:]


def test_loss_and_jitter_need_the_emulated_network(tmp_path, capsys):
    code = main(["launch", str(SCENARIO), "--loss", "0.05", "--out", str(tmp_path / "run")])
    assert code == 2 and "add --network emulated" in capsys.readouterr().err
