"""The routed simulator network: a fixed socket pair for any number of devices, mailbox checks kept."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import zmq

from p2pfed.transport import Mailbox, inproc_endpoint, new_namespace
from p2pfed.transport.inproc import RoutedInprocNetwork

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def small_context():
    """A context that refuses a 17th socket: per-device mailboxes cannot fit in it."""
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, 16)
    yield ctx
    ctx.term()


def test_ten_thousand_devices_on_two_sockets(small_context):
    fds = open_fds() if Path("/proc/self/fd").exists() else None
    net = RoutedInprocNetwork(10_000, 4096, context=small_context)
    try:
        assert net.sockets == 2
        if fds is not None:
            assert open_fds() - fds <= 8  # not one per device
        rng = np.random.default_rng(0)
        for dst in range(10_000):
            payload = dst.to_bytes(4, "big") + rng.bytes(int(rng.integers(0, 200)))
            assert net.carry(dst, payload) == payload
        assert (net.stats.sent, net.stats.received, net.misrouted) == (10_000, 10_000, 0)
    finally:
        net.close()
    assert net.sockets == 0


def test_per_device_mailboxes_do_not_fit_where_the_routed_network_does(small_context):
    ns, boxes = new_namespace(), []
    try:
        with pytest.raises(zmq.ZMQError):
            for i in range(17):
                boxes.append(Mailbox(small_context, inproc_endpoint(ns, i)))
    finally:
        for b in boxes:
            b.close()


def test_frames_are_checked_like_a_mailbox_and_routed_by_envelope():
    net = RoutedInprocNetwork(5, 1000)
    intruder = net.context.socket(zmq.PUSH)
    intruder.setsockopt(zmq.LINGER, 0)
    intruder.connect(net.endpoint)
    try:
        intruder.send(b"no envelope")                                          # one frame
        intruder.send_multipart([(1).to_bytes(4, "big") + bytes(8), b"a", b"b"])  # three frames
        intruder.send_multipart([(3).to_bytes(4, "big") + (99).to_bytes(8, "big"), b"forged"])
        for i in range(12):  # the PULL socket takes turns between the two senders
            assert net.carry(i % 5, f"frame {i}".encode()) == f"frame {i}".encode()
        assert net.stats.rejected_multipart == 2 and net.misrouted == 1
        assert net.carry(2, b"x" * 1001) is None  # over max_message_bytes
        assert net.stats.rejected_oversized == 1
        big = RoutedInprocNetwork(2, 1 << 20)
        payload = np.random.default_rng(1).bytes(300_000)  # sent zero-copy
        assert big.carry(1, payload) == payload
        big.close()
    finally:
        intruder.close(0)
        net.close()


def test_a_broadcast_passes_through_once_for_all_its_destinations():
    net = RoutedInprocNetwork(10_000, 1 << 20)
    try:
        everyone = list(range(10_000))   # the envelope of a broadcast to every device fits too
        payload = np.random.default_rng(2).bytes(200_000)
        assert net.broadcast(everyone, payload) == payload
        assert net.broadcast([4, 7], b"small") == b"small"
        assert (net.stats.sent, net.stats.received, net.misrouted) == (2, 2, 0)
        with pytest.raises(ValueError, match="destination"):
            net.broadcast([1, 10_000], b"x")
    finally:
        net.close()


def test_bad_destinations_and_a_closed_network_are_refused():
    net = RoutedInprocNetwork(3, 1000)
    for bad in (-1, 3, 1.0, True):
        with pytest.raises(ValueError, match="destination"):
            net.carry(bad, b"x")
    net.close()
    net.close()
    with pytest.raises(RuntimeError, match="closed"):
        net.carry(0, b"x")


def test_1100_devices_run_past_the_default_socket_limit():
    """One inproc mailbox per device stopped runs at ~1,000 devices (``Too many open files``,
    1,023 sockets per ZeroMQ context); the engine's routed pair carries 1,100 devices' frames."""
    from p2pfed.engine.runner import run_scenario
    from p2pfed.scenario.loader import load_scenario

    assert zmq.Context.instance().get(zmq.MAX_SOCKETS) < 1100 * 2
    loaded = load_scenario(SCENARIOS / "synthetic-small.yaml", [
        "rounds=2", "algorithm.name=gossip-avg", "dataset.synthetic.num_devices=1100",
        "dataset.synthetic.samples_per_class=4", "dataset.synthetic.num_features=4",
        "model.hidden=[4]", "topology.kind=random-regular", "topology.degree=2"])
    summary = run_scenario(loaded, progress=False)
    assert summary["devices"] == 1100
    assert summary["comm"]["delivery_ratio"] == 1.0
    assert summary["comm"]["messages_sent"] == 2 * 1100 * 2   # 2 rounds x 1,100 devices x degree 2
    assert summary["comm"]["messages_dropped"] == 0
