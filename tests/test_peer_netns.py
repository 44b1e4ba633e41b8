"""Optional: two peers in separate network namespaces joined by a veth link (netem delay/loss
when the kernel has it). Skips where namespaces are not permitted (no root / CAP_NET_ADMIN)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest
import yaml

from p2pfed.peer.launcher import wait_all
from tests.peer_support import write_peer_files


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def namespaces() -> Iterator[tuple[list[str], list[str], bool]]:
    if shutil.which("ip") is None:
        pytest.skip("iproute2 not installed")
    tag = f"{os.getpid() % 10**5}{random.randrange(100)}"
    names, devs = [f"p2pf{tag}a", f"p2pf{tag}b"], [f"p2pf{tag}va", f"p2pf{tag}vb"]
    net = f"10.{random.randrange(200, 250)}.{random.randrange(256)}"
    addrs = [f"{net}.1", f"{net}.2"]
    try:
        _ip("netns", "add", names[0])
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"network namespaces not permitted here: {getattr(exc, 'stderr', exc)!r}")
    try:
        _ip("netns", "add", names[1])
        _ip("link", "add", devs[0], "type", "veth", "peer", "name", devs[1])
        for ns, dev, addr in zip(names, devs, addrs):
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        netem = all(subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "netem", "delay",
                                    "20ms", "loss", "1%"], capture_output=True, timeout=10).returncode == 0
                    for ns, dev in zip(names, devs)) if shutil.which("tc") else False
        yield names, addrs, netem
    finally:
        for ns in names:  # deleting a namespace deletes its end of the veth pair, and so both
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


@pytest.mark.slow   # two peer processes; in the slow set .ci/run runs
def test_two_peers_in_separate_namespaces_over_veth(tmp_path, namespaces):
    names, addrs, netem = namespaces
    configs = write_peer_files(tmp_path, n=2)
    cfgs = [yaml.safe_load(c.read_text()) for c in configs]
    ports = [c["listen"].rsplit(":", 1)[1] for c in cfgs]
    for i, (cfg, path) in enumerate(zip(cfgs, configs)):
        cfg["listen"] = f"tcp://{addrs[i]}:{ports[i]}"
        for nb in cfg["neighbours"]:
            nb["endpoint"] = f"tcp://{addrs[nb['id']]}:{ports[nb['id']]}"
        path.write_text(yaml.safe_dump(cfg))
    procs = []
    for ns, path in zip(names, configs):
        with path.with_suffix(".log").open("wb") as log:
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "p2pfed.cli.main",
                                           "peer", "--config", str(path)], stdout=log, stderr=subprocess.STDOUT))
    codes = wait_all(procs, 120)
    logs = [path.with_suffix(".log").read_text()[-1500:] for path in configs]
    assert codes == [0, 0], logs
    for i in range(2):
        report = json.loads((tmp_path / f"peer-{i}" / "peer.json").read_text())
        assert report["rounds_done"] == 3 and report["secure"]
        counters = report["recorder"]["counters"][0]
        assert counters["messages_received"] == 3 and counters["messages_dropped"] == 0
    print(f"namespaces {names}, netem delay/loss: {netem}")
