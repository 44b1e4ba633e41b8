"""``p2pfed launch --network emulated``: the plan's bundle run on an emulated LAN.

Each device becomes a host of ``p2pfed.network.lan`` with its own address; ``p2pfed plan`` writes
the bundle for those addresses (``OUT/bundle/``), every peer runs its folder's ``start.sh``
unchanged in its host's namespace, and the scenario's topology becomes the links, each with its
``latency_s`` and ``bandwidth_bps`` (optionally loss and jitter); over contacts, every pair that
meets becomes a link that carries packets only during its contacts, replayed in wall-clock time
from the peers' shared start (``--speedup``: simulated seconds per wall second, the links that
much faster). What is tested here is what a
user copies to real machines. The results are merged as ``p2pfed merge`` does, with the
emulator's per-link counters in ``summary.json`` ``runtime.network``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from p2pfed.network.lan import EmulatedLan, host_address
from p2pfed.network.linkemu import LinkModel
from p2pfed.peer.bundle import DEFAULT_PORT, write_bundle
from p2pfed.peer.merge import merge_bundle
from p2pfed.peer.config import PeerTiming
from p2pfed.peer.contacts import contact_start_time
from p2pfed.peer.faults import FaultDriver, Faults, skew_clocks
from p2pfed.peer.launcher import peer_environment, wait_all
from p2pfed.scenario.spec import RunSpec

OPEN_EARLY_S = 0.05   # wall seconds a contact's link opens before the peers' clocks say it starts


def link_models(loaded: RunSpec, *, loss: float = 0.0, jitter_s: float = 0.0,
                speedup: float = 1.0) -> dict[tuple[int, int], LinkModel]:
    """Both directions of every topology edge, with the edge's figures (as the simulator's); over
    contacts, of every pair that meets, up only during its contacts, in wall-clock seconds after
    the shared start (simulated time / ``speedup``, the links ``speedup`` times faster)."""
    links = {}
    if loaded.scenario.contacts.kind in ("none", "static"):
        for a, b, edge in loaded.graph.edges(data=True):
            model = LinkModel(edge["latency_s"] / speedup, edge["bandwidth_bps"] * speedup, loss, jitter_s)
            links[a, b] = links[b, a] = model
        return links
    plan, duration = loaded.contacts
    windows: dict[tuple[int, int], list[tuple[float, float]]] = {}
    figures = {}
    for c in plan.contacts:
        if c.start < duration:   # opened a moment early: a peer's first packet never meets a closed link
            windows.setdefault((c.a, c.b), []).append((max(c.start / speedup - OPEN_EARLY_S, 0.0),
                                                       min(c.end, duration) / speedup))
            figures[c.a, c.b] = (c.latency_s, c.bandwidth_bps)
    for (a, b), up in windows.items():
        latency, bandwidth = figures[a, b]
        links[a, b] = links[b, a] = LinkModel(latency / speedup, bandwidth * speedup, loss, jitter_s, tuple(up))
    return links


def launch_emulated(loaded: RunSpec, out: Path, *, insecure: bool, loss: float = 0.0, jitter_s: float = 0.0,
                    faults: Faults | None = None, faults_source: str = "faults", timeout_s: float = 3600.0,
                    timing: PeerTiming = PeerTiming(), congestion_control: str | None = None) -> dict[str, Any]:
    """Plan, build the LAN, run every peer's ``start.sh`` in its namespace (injecting ``faults``),
    merge; raises RuntimeError naming the peers that failed (LanError where the LAN cannot be
    built). A peer the faults kill is left out of the results and named in ``runtime.faults``.
    ``congestion_control``: the hosts' TCP congestion control (None: the kernel's default); the
    one used is in ``runtime.network.congestion_control``."""
    started = time.perf_counter()
    faults = faults or Faults()
    n = loaded.num_devices
    links = faults.shape(link_models(loaded, loss=loss, jitter_s=jitter_s, speedup=timing.speedup), faults_source)
    bundle = out / "bundle"
    endpoints = [f"tcp://{host_address(i)}:{DEFAULT_PORT}" for i in range(n)]
    contacts = loaded.scenario.contacts.kind != "none"
    start_time = contact_start_time(n) if contacts or timing.shared_grid else None
    write_bundle(loaded, endpoints, bundle, insecure=insecure, timing=timing, start_time=start_time,
                 force=True)   # this launch's own bundle
    skew_clocks(faults, bundle)
    env = peer_environment()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # the venv's p2pfed
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        with EmulatedLan(n, links, out / "network", seed=loaded.scenario.seed, origin=start_time,
                         congestion_control=congestion_control) as lan:
            procs = []
            for i in range(n):
                folder = bundle / f"peer-{i}"
                with (folder / "peer.log").open("ab") as log:
                    procs.append(lan.spawn(i, ["sh", "start.sh"], cwd=folder, env=env, log=log))
            driver = FaultDriver(faults, lan, procs, [bundle / f"peer-{i}" / "results" / "progress.json"
                                                       for i in range(n)])
            deadline = time.monotonic() + timeout_s
            while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                driver.step()
                time.sleep(0.1)
            codes = wait_all(procs, 0.01)
    finally:
        signal.signal(signal.SIGTERM, previous)
    failed = [i for i, c in enumerate(codes) if c != 0 and i not in driver.killed]
    if failed:
        raise RuntimeError(f"peers {failed} failed (exit codes {[codes[i] for i in failed]}); "
                           f"see {bundle}/peer-I/peer.log")
    network = {"loss": loss, "jitter_s": jitter_s, "congestion_control": lan.congestion_control,
               **{k: v for k, v in lan.stats.items() if k != "links"}}
    return merge_bundle(bundle, out, skip=driver.killed, wall_time_s=time.perf_counter() - started,
                        runtime={"kind": "emulated", "network": network,
                                 "faults": {"spec": faults.model_dump(), "events": driver.events,
                                            "killed": sorted(driver.killed)}})
