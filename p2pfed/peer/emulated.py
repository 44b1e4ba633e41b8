"""``p2pfed launch --network emulated``: the plan's bundle run on an emulated LAN.

Each device becomes a host of ``p2pfed.network.lan`` with its own address; ``p2pfed plan`` writes
the bundle for those addresses (``OUT/bundle/``), every peer runs its folder's ``start.sh``
unchanged in its host's namespace, and the scenario's topology becomes the links, each with its
``latency_s`` and ``bandwidth_bps`` (optionally loss and jitter). What is tested here is what a
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
from p2pfed.peer.bundle import DEFAULT_PORT, merge_bundle, write_bundle
from p2pfed.peer.config import PeerTiming
from p2pfed.peer.faults import FaultDriver, Faults
from p2pfed.peer.launcher import peer_environment, wait_all
from p2pfed.scenario.build import build_graph, load_scenario_dataset
from p2pfed.scenario.loader import LoadedScenario


def link_models(loaded: LoadedScenario, n: int, *, loss: float = 0.0, jitter_s: float = 0.0
                ) -> dict[tuple[int, int], LinkModel]:
    """Both directions of every topology edge, with the edge's figures (as the simulator's)."""
    links = {}
    for a, b, edge in build_graph(loaded, n).edges(data=True):
        model = LinkModel(edge["latency_s"], edge["bandwidth_bps"], loss, jitter_s)
        links[a, b] = links[b, a] = model
    return links


def launch_emulated(loaded: LoadedScenario, out: Path, *, insecure: bool, loss: float = 0.0, jitter_s: float = 0.0,
                    faults: Faults | None = None, faults_source: str = "faults", timeout_s: float = 3600.0,
                    timing: PeerTiming = PeerTiming()) -> dict[str, Any]:
    """Plan, build the LAN, run every peer's ``start.sh`` in its namespace (injecting ``faults``),
    merge; raises RuntimeError naming the peers that failed (LanError where the LAN cannot be
    built). A peer the faults kill is left out of the results and named in ``runtime.faults``."""
    started = time.perf_counter()
    faults = faults or Faults()
    n = len(load_scenario_dataset(loaded).devices)
    links = faults.shape(link_models(loaded, n, loss=loss, jitter_s=jitter_s), faults_source)
    bundle = out / "bundle"
    endpoints = [f"tcp://{host_address(i)}:{DEFAULT_PORT}" for i in range(n)]
    write_bundle(loaded, endpoints, bundle, insecure=insecure, timing=timing)
    env = peer_environment()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # the venv's p2pfed
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        with EmulatedLan(n, links, out / "network", seed=loaded.scenario.seed) as lan:
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
    network = {"loss": loss, "jitter_s": jitter_s, **{k: v for k, v in lan.stats.items() if k != "links"}}
    return merge_bundle(bundle, out, skip=driver.killed, wall_time_s=time.perf_counter() - started,
                        runtime={"kind": "emulated", "network": network,
                                 "faults": {"spec": faults.model_dump(), "events": driver.events,
                                            "killed": sorted(driver.killed)}})
