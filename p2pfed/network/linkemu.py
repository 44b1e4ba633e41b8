"""A userspace link emulator: every IP packet between two emulated hosts crosses its link's model.

Why userspace: the kernels these tests run on have no ``sch_netem`` (no kernel delay or loss
qdisc), so the emulated LAN (``p2pfed.network.lan``) routes every packet through a TUN device in
its hub namespace and this process plays netem: for a packet from host ``a`` to host ``b`` it
applies the directed link ``a -> b`` exactly as the simulator models a link
(``engine/simulation.py``): first in, first out, the last byte leaves at
``max(now, link free) + 8 * size / bandwidth_bps``, and the packet arrives ``latency_s`` (plus
optional jitter, never reordering) later; with ``loss`` each packet is dropped with that
probability, and a link's queue holds at most ``queue_packets`` (netem's default 1000) before it
drops the newest. The peers' TCP stacks, ZeroMQ and CURVE are real; only the wire is modelled.

A link with contact windows (``LinkModel.up``: a scenario's contacts replayed in wall-clock time)
carries packets only within them, counted from the config's ``origin`` (a unix time); outside
them it drops every packet, as a cut link does.

Run as ``python -m p2pfed.network.linkemu CONFIG.json`` inside the hub namespace; SIGUSR1 re-reads
the config's ``control`` file (``{"blocked": [[src, dst], ...]}``: links cut until the next
SIGUSR1, a partition); SIGTERM writes the per-link counters to the config's ``stats`` file and exits.
"""

from __future__ import annotations

import bisect
import fcntl
import heapq
import math
import json
import os
import random
import select
import signal
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
QUEUE_PACKETS = 1000


@dataclass(frozen=True)
class LinkModel:
    """One direction of one link, as the scenario's topology gives it."""

    latency_s: float
    bandwidth_bps: float
    loss: float = 0.0
    jitter_s: float = 0.0
    up: tuple[tuple[float, float], ...] = ()   # contacts: [start, end) seconds after the origin (none: always up)

    def is_up(self, t: float) -> bool:
        """Whether the link carries packets ``t`` seconds after the emulator's origin."""
        if not self.up:
            return True
        k = bisect.bisect_right(self.up, (t, math.inf)) - 1
        return k >= 0 and self.up[k][0] <= t < self.up[k][1]


@dataclass
class LinkCounters:
    """What crossed one directed link."""

    packets: int = 0
    bytes: int = 0
    lost: int = 0
    queue_full: int = 0
    down: int = 0           # dropped while the link was cut (a partition) or out of contact


@dataclass
class LinkScheduler:
    """When each packet leaves the emulator: the link model without any I/O (tested alone)."""

    links: dict[tuple[str, str], LinkModel]
    rng: random.Random = field(default_factory=random.Random)
    queue_packets: int = QUEUE_PACKETS
    free_at: dict[tuple[str, str], float] = field(default_factory=dict)
    last_release: dict[tuple[str, str], float] = field(default_factory=dict)
    backlog: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    counters: dict[tuple[str, str], LinkCounters] = field(default_factory=dict)
    blocked: set[tuple[str, str]] = field(default_factory=set)    # links cut for now
    unlinked: int = 0
    origin: float = 0.0      # the clock reading that contact windows count from

    def admit(self, src: str, dst: str, size: int, now: float) -> float | None:
        """The time the packet is handed to ``dst``, or None when it is dropped."""
        key = (src, dst)
        link = self.links.get(key)
        if link is None:
            self.unlinked += 1       # two hosts the topology does not join
            return None
        count = self.counters.setdefault(key, LinkCounters())
        if key in self.blocked or not link.is_up(now - self.origin):
            count.down += 1
            return None
        waiting = self.backlog.setdefault(key, [])
        while waiting and waiting[0] <= now:
            heapq.heappop(waiting)
        if len(waiting) >= self.queue_packets:
            count.queue_full += 1
            return None
        if link.loss and self.rng.random() < link.loss:
            count.lost += 1
            return None
        done = max(now, self.free_at.get(key, now)) + 8.0 * size / link.bandwidth_bps
        self.free_at[key] = done
        heapq.heappush(waiting, done)
        jitter = self.rng.uniform(-link.jitter_s, link.jitter_s) if link.jitter_s else 0.0
        release = max(done + max(link.latency_s + jitter, 0.0), self.last_release.get(key, 0.0))
        self.last_release[key] = release
        count.packets += 1
        count.bytes += size
        return release

    def stats(self) -> dict[str, Any]:
        links = {f"{s}>{d}": vars(c) for (s, d), c in sorted(self.counters.items())}
        totals = {k: sum(c[k] for c in links.values()) for k in ("packets", "bytes", "lost", "queue_full", "down")}
        return {**totals, "unlinked": self.unlinked, "links": links}


def ipv4_addresses(packet: bytes) -> tuple[str, str] | None:
    """Source and destination of an IPv4 packet (None for anything else)."""
    if len(packet) < 20 or packet[0] >> 4 != 4:
        return None
    return ".".join(map(str, packet[12:16])), ".".join(map(str, packet[16:20]))


def open_tun(name: str) -> int:
    """A non-blocking file descriptor on the existing TUN device ``name`` (no packet header)."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def serve(config: dict[str, Any]) -> None:
    """Forward packets between the TUN device's reads and writes until SIGTERM."""
    links = {(a, b): LinkModel(**{**m, "up": tuple(map(tuple, m.get("up", ())))}) for a, b, m in config["links"]}
    # contact windows count from the unix time ``origin``, read here on the monotonic clock
    origin = time.monotonic() + config.get("origin", time.time()) - time.time()
    scheduler = LinkScheduler(links, random.Random(config.get("seed", 0)), origin=origin)
    fd = open_tun(config["tun"])
    stop = reload = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    def _reload(*_: object) -> None:
        nonlocal reload
        reload = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGUSR1, _reload)
    Path(config["ready"]).write_text(str(os.getpid()))
    pending: list[tuple[float, int, bytes]] = []
    order = 0
    while not stop:
        if reload:
            reload = False
            control = json.loads(Path(config["control"]).read_text())
            scheduler.blocked = {(a, b) for a, b in control["blocked"]}
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            os.write(fd, heapq.heappop(pending)[2])
        wait = min(pending[0][0] - now, 0.2) if pending else 0.2
        try:
            readable, _, _ = select.select([fd], [], [], max(wait, 0.0))
        except InterruptedError:
            continue
        if not readable:
            continue
        for _ in range(256):          # drain what is there, then release what is due
            try:
                packet = os.read(fd, 65536)
            except BlockingIOError:
                break
            hosts = ipv4_addresses(packet)
            if hosts is None:
                continue
            release = scheduler.admit(*hosts, len(packet), time.monotonic())
            if release is not None:
                heapq.heappush(pending, (release, order, packet))
                order += 1
    Path(config["stats"]).write_text(json.dumps(scheduler.stats(), indent=1) + "\n")


def main(argv: list[str]) -> int:
    serve(json.loads(Path(argv[0]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
