"""An emulated LAN: one network namespace per host, every host's traffic through a link emulator.

Layout: a hub namespace holds one veth end per host and a TUN device; each host's namespace holds
the other end (``eth0``, one address, a default route to the hub). The hub's policy routing sends
every packet that arrives from a host into the TUN device, where ``p2pfed.network.linkemu``
delays, rate-limits or drops it as its directed link says and writes it back; the hub then
routes it to the destination host. So hosts talk only through the modelled links, and two hosts
the topology does not join cannot talk at all.

Nothing outlives the LAN: the namespaces are anonymous (no ``ip netns`` name, no bind mount),
each held by a ``sleep`` process that the kernel kills when the process that built the LAN dies
(``PR_SET_PDEATHSIG``), as it kills every process started in a namespace; a namespace, and
the veth ends, routes and TUN device in it, disappear with its last process. So a normal end,
Ctrl-C, an exception, or a SIGKILL of the launcher all leave nothing behind.
Addresses are 10.77.0.0/16 inside these namespaces only; the host's own network is never touched.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from p2pfed.atomic import write_text_atomically
from p2pfed.network.linkemu import LinkModel

HUB_ADDRESS = "10.77.255.254"
PR_SET_PDEATHSIG = 1
NEEDED = ("an emulated network needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), util-linux's unshare and nsenter, "
          "iproute2's ip, and /dev/net/tun")


class LanError(RuntimeError):
    """The emulated LAN cannot be built here (says what is missing)."""


def host_address(i: int) -> str:
    """Host ``i``'s address: 10.77.x.y, never .0 or .255, 250 hosts per /24."""
    return f"10.77.{i // 250}.{i % 250 + 1}"


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent dies, however it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _namespace_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def _run(argv: list[str], what: str, stdin: str | None = None) -> None:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise LanError(f"{what}: {' '.join(argv[:6])} failed: {done.stderr.strip()[:300]}")


def check_permitted() -> None:
    """Raise LanError (one line: what is needed) unless namespaces can be built here."""
    missing = [tool for tool in ("unshare", "nsenter", "ip") if shutil.which(tool) is None]
    if missing or not os.path.exists("/dev/net/tun"):
        raise LanError(f"{NEEDED}; missing here: {', '.join(missing) or '/dev/net/tun'}")
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, text=True, timeout=10)
    if probe.returncode != 0:
        raise LanError(f"{NEEDED}; unshare --net said: {probe.stderr.strip()[:200]}")


def congestion_controls() -> tuple[str, str]:
    """(the kernel's default TCP congestion control, the ones a network namespace may choose),
    read from /proc (a namespace inherits the default; it may set only the allowed ones)."""
    base = Path("/proc/sys/net/ipv4")
    return ((base / "tcp_congestion_control").read_text().strip(),
            (base / "tcp_allowed_congestion_control").read_text().strip())


class EmulatedLan:
    """``with EmulatedLan(n, links, folder) as lan: lan.spawn(i, argv, ...)``.

    ``links`` maps a directed pair of host indices to its LinkModel; ``folder`` receives the
    emulator's config, its per-link counters (``network.json``) and ``lan.json`` (the holders'
    process ids and namespace ids, written as soon as they exist, so a test can check that they
    are gone)."""

    def __init__(self, hosts: int, links: Mapping[tuple[int, int], LinkModel], folder: Path, *, seed: int = 0,
                 origin: float | None = None, congestion_control: str | None = None):
        """``origin``: the unix time the links' contact windows count from (None: now);
        ``congestion_control``: the hosts' TCP congestion control (None: the kernel's default,
        which namespaces inherit; it changes how long a message takes: ``network.slow_start``)."""
        self.hosts, self.links, self.folder, self.seed = hosts, dict(links), folder, seed
        self.origin = origin
        self.congestion_control = congestion_control
        self._choose_congestion_control = congestion_control is not None
        self.addresses = [host_address(i) for i in range(hosts)]
        self.holders: list[subprocess.Popen] = []
        self.peer_pids: list[int] = []            # the holders of the hosts' namespaces, by host
        self.started: list[subprocess.Popen] = []
        self.emulator: subprocess.Popen | None = None
        self.stats: dict[str, Any] = {}

    # building -----------------------------------------------------------------------------
    def __enter__(self) -> EmulatedLan:
        check_permitted()
        default, allowed = congestion_controls()
        if self.congestion_control is None:
            self.congestion_control = default
        elif self.congestion_control not in allowed.split():
            raise LanError(f"congestion control {self.congestion_control!r}: a network namespace may use only "
                           f"{', '.join(allowed.split())} (net.ipv4.tcp_allowed_congestion_control)")
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _holder(self) -> subprocess.Popen:
        own = _namespace_of(os.getpid())
        p = subprocess.Popen(["unshare", "--net", "sleep", "infinity"], preexec_fn=_die_with_parent,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.holders.append(p)
        deadline = time.monotonic() + 10
        while _namespace_of(p.pid) == own:
            if p.poll() is not None or time.monotonic() > deadline:
                raise LanError(f"{NEEDED}; unshare exited: {p.stderr.read().decode()[:200] if p.stderr else ''}")
            time.sleep(0.005)
        return p

    def _in(self, pid: int, argv: list[str]) -> list[str]:
        return ["nsenter", "-t", str(pid), "-n", *argv]

    def _build(self) -> None:
        hub = self._holder()
        peers = [self._holder() for _ in range(self.hosts)]
        (self.folder / "lan.json").write_text(json.dumps({
            "pids": [p.pid for p in self.holders],
            "namespaces": [_namespace_of(p.pid) for p in self.holders]}) + "\n")
        for i, p in enumerate(peers):
            _run(["ip", "link", "add", "eth0", "netns", str(p.pid), "type", "veth", "peer", "name", f"h{i}",
                  "netns", str(hub.pid)], f"host {i}: veth")
            _run(self._in(p.pid, ["ip", "-batch", "-"]), f"host {i}: address", "\n".join([
                "link set lo up", f"addr add {self.addresses[i]}/32 dev eth0", "link set eth0 up",
                f"route add default via {HUB_ADDRESS} dev eth0 onlink"]) + "\n")
            if self._choose_congestion_control:
                _run(self._in(p.pid, ["sysctl", "-q", "-w",
                                      f"net.ipv4.tcp_congestion_control={self.congestion_control}"]),
                     f"host {i}: congestion control")
        hub_cmds = ["link set lo up", "tuntap add dev tun0 mode tun", "link set tun0 up",
                    "route add default dev tun0 table 100",
                    "rule add iif tun0 lookup main priority 100", "rule add lookup 100 priority 200"]
        for i in range(self.hosts):
            hub_cmds += [f"addr add {HUB_ADDRESS}/32 dev h{i}", f"link set h{i} up",
                         f"route add {self.addresses[i]}/32 dev h{i}"]
        _run(self._in(hub.pid, ["ip", "-batch", "-"]), "hub", "\n".join(hub_cmds) + "\n")
        _run(self._in(hub.pid, ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                                "net.ipv4.conf.default.rp_filter=0", "net.ipv4.conf.tun0.rp_filter=0"]), "hub sysctl")
        ready = self.folder / "linkemu.ready"
        self.control = self.folder / "linkemu-control.json"
        config = {"tun": "tun0", "seed": self.seed, "ready": str(ready), "control": str(self.control),
                  "origin": time.time() if self.origin is None else self.origin,
                  "stats": str(self.folder / "network.json"),
                  "links": [[self.addresses[a], self.addresses[b], vars(m)]
                            for (a, b), m in sorted(self.links.items())]}
        (self.folder / "linkemu.json").write_text(json.dumps(config) + "\n")
        ready.unlink(missing_ok=True)
        with (self.folder / "linkemu.log").open("ab") as log:
            self.emulator = subprocess.Popen(
                self._in(hub.pid, [sys.executable, "-m", "p2pfed.network.linkemu", str(self.folder / "linkemu.json")]),
                preexec_fn=_die_with_parent, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not ready.exists():
            if self.emulator.poll() is not None or time.monotonic() > deadline:
                raise LanError(f"the link emulator did not start (see {self.folder / 'linkemu.log'})")
            time.sleep(0.01)
        self.peer_pids = [p.pid for p in peers]

    # using ---------------------------------------------------------------------------------
    def spawn(self, host: int, argv: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
              log: IO[bytes] | None = None) -> subprocess.Popen:
        """Start ``argv`` on host ``host`` (in its namespace); it dies if this process dies."""
        p = subprocess.Popen(self._in(self.peer_pids[host], list(argv)), cwd=cwd, env=env, stdout=log,
                             stderr=subprocess.STDOUT if log else None, stdin=subprocess.DEVNULL,
                             preexec_fn=_die_with_parent)
        self.started.append(p)
        return p

    def cut(self, links: Sequence[tuple[int, int]]) -> None:
        """Cut exactly these directed links (host indices) from now on; ``[]`` heals them all."""
        assert self.emulator is not None
        write_text_atomically(self.control, json.dumps(
            {"blocked": [[self.addresses[a], self.addresses[b]] for a, b in links]}) + "\n")
        self.emulator.send_signal(signal.SIGUSR1)

    def close(self) -> None:
        """Stop everything started here, the emulator last (its counters are kept), then the
        namespaces' holders; idempotent."""
        for p in self.started:
            if p.poll() is None:
                p.kill()
        for p in self.started:
            p.wait()
        if self.emulator is not None and self.emulator.poll() is None:
            self.emulator.send_signal(signal.SIGTERM)
            try:
                self.emulator.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.emulator.kill()
                self.emulator.wait()
        stats = self.folder / "network.json"
        if stats.exists():
            self.stats = json.loads(stats.read_text())
        for p in self.holders:
            if p.poll() is None:
                p.kill()
            p.wait()
            if p.stderr:
                p.stderr.close()
        self.started, self.holders, self.emulator = [], [], None


def namespaces_alive(namespaces: Sequence[str]) -> list[str]:
    """Which of these namespace ids (``net:[inode]``) some process still holds."""
    wanted, alive = set(namespaces), set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ns = os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            continue
        if ns in wanted:
            alive.add(ns)
    return sorted(alive)
