"""ZeroMQ channels: delivery, ordering, size limits and never hanging on dead peers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from p2pfed.transport import (REJECT_MULTIPART, REJECT_OVERSIZED, Mailbox, Message, Outbox, Rejected, decode, encode,
                              inproc_endpoint, new_namespace)


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.term()  # hangs if any socket was left open: checks that close() really closes


def payloads(n: int) -> list[bytes]:
    rng = np.random.default_rng(1)
    sizes = [0, 1, 100, 70_000, 300_000]  # both sides of the zero-copy threshold
    return [rng.bytes(sizes[i % len(sizes)]) + i.to_bytes(4, "little") for i in range(n)]


def test_inproc_endpoint_is_unique_and_validated() -> None:
    a, b = new_namespace(), new_namespace()
    assert inproc_endpoint(a, 1) != inproc_endpoint(b, 1) != inproc_endpoint(a, 2)
    assert inproc_endpoint(a, 0).startswith("inproc://")
    for bad_ns, bad_id in [("", 0), ("a b", 0), ("ok", -1), ("ok", True)]:
        with pytest.raises(ValueError):
            inproc_endpoint(bad_ns, bad_id)


def test_inproc_200_messages_arrive_intact_and_in_order(ctx: zmq.Context) -> None:
    ep = inproc_endpoint(new_namespace(), 0)
    data = payloads(200)
    with Mailbox(ctx, ep) as box, Outbox(ctx) as out:
        for item in data:
            assert out.send(ep, item, timeout_ms=0)
        assert box.drain() == data
        assert box.receive() is None
        assert box.stats.received == 200 and out.stats.sent == 200


def test_inproc_send_then_receive_on_same_thread_never_waits(ctx: zmq.Context) -> None:
    """The simulator sends and immediately receives on one thread: no message may lag."""
    ns = new_namespace()
    boxes = [Mailbox(ctx, inproc_endpoint(ns, i)) for i in range(20)]
    out = Outbox(ctx)
    try:
        for i in range(500):
            box = boxes[i % len(boxes)]  # first 20 sends each hit a freshly connected peer
            payload = encode(Message("gossip/model", i % 7, i, float(i), {"i": i}, {"w": np.full(3, i, np.int32)}))
            assert out.send(box.endpoint, payload, timeout_ms=0)
            got = box.receive(timeout_ms=0)
            assert got == payload, i
            assert decode(got).meta == {"i": i}
    finally:
        out.close()
        for box in boxes:
            box.close()


def test_tcp_port_zero_resolves_and_delivers(ctx: zmq.Context) -> None:
    with Mailbox(ctx, "tcp://127.0.0.1:0") as box, Outbox(ctx) as out:
        assert box.endpoint.startswith("tcp://127.0.0.1:") and not box.endpoint.endswith(":0")
        data = payloads(20)
        for item in data:
            assert out.send(box.endpoint, item)
        got = [box.receive(timeout_ms=2000) for _ in data]
        assert got == data


def test_tcp_oversized_frame_is_dropped_and_channel_recovers(ctx: zmq.Context) -> None:
    with Mailbox(ctx, "tcp://127.0.0.1:*", max_bytes=1000) as box, Outbox(ctx) as out:
        assert out.send(box.endpoint, b"x" * 5000)
        assert box.receive(timeout_ms=200) is None  # zmq drops the connection on MAXMSGSIZE
        deadline = time.monotonic() + 5
        got = None
        while got is None and time.monotonic() < deadline:  # PUSH reconnects after the drop
            out.send(box.endpoint, b"ok")
            got = box.receive(timeout_ms=100)
        assert got == b"ok"


def test_inproc_oversized_and_multipart_are_rejected_and_counted(ctx: zmq.Context) -> None:
    ep = inproc_endpoint(new_namespace(), 3)
    with Mailbox(ctx, ep, max_bytes=1000) as box, Outbox(ctx) as out:
        raw = ctx.socket(zmq.PUSH)
        raw.connect(ep)
        raw.send_multipart([b"a", b"b", b"c"])
        raw.close(0)
        assert out.send(ep, b"y" * 1001)
        assert out.send(ep, b"fine")
        assert box.receive(timeout_ms=500) == b"fine"
        assert box.receive() is None
        assert box.stats.rejected_multipart == 1 and box.stats.rejected_oversized == 1


def test_send_to_unbound_endpoint_returns_within_timeout(ctx: zmq.Context) -> None:
    out = Outbox(ctx, sndhwm=2, send_timeout_ms=200)
    start = time.monotonic()
    results = [out.send("tcp://127.0.0.1:1", b"z" * 10) for _ in range(5)]
    results += [out.send(inproc_endpoint(new_namespace(), 9), b"z") for _ in range(5)]
    assert time.monotonic() - start < 5 * 0.2 * 2 + 1
    assert not all(results)  # the queue fills up and further sends fail instead of blocking
    assert out.stats.send_failed == results.count(False)
    start = time.monotonic()
    out.close()
    assert time.monotonic() - start < 1


def test_full_peer_queue_returns_false_without_waiting_when_timeout_zero(ctx: zmq.Context) -> None:
    ep = inproc_endpoint(new_namespace(), 1)
    with Mailbox(ctx, ep, rcvhwm=5) as box, Outbox(ctx, sndhwm=5) as out:
        sent = [out.send(ep, b"m", timeout_ms=0) for _ in range(50)]
        assert sent[0] and not sent[-1]
        assert len(box.drain()) == sent.count(True)


def test_bad_endpoints_and_closed_use_raise_clear_errors(ctx: zmq.Context) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        Mailbox(ctx, "http://nope")
    with Outbox(ctx) as out, pytest.raises(ValueError, match="'udp://x'"):
        out.send("udp://x", b"")
    ep = inproc_endpoint(new_namespace(), 0)
    with Mailbox(ctx, ep), pytest.raises(ValueError, match="cannot bind"):
        Mailbox(ctx, ep)
    box = Mailbox(ctx, ep)
    box.close()
    box.close()
    with pytest.raises(RuntimeError, match="closed"):
        box.receive()


def test_configure_hook_runs_before_bind_and_connect(ctx: zmq.Context) -> None:
    seen: list[tuple[int, str]] = []

    def configure(sock: zmq.Socket, endpoint: str) -> None:
        seen.append((sock.type, endpoint))
        sock.setsockopt(zmq.IDENTITY, b"peer")

    ep = inproc_endpoint(new_namespace(), 0)
    with Mailbox(ctx, ep, configure=configure) as box, Outbox(ctx, configure=configure) as out:
        out.send(ep, b"hi")
        assert box.receive(timeout_ms=100) == b"hi"
    assert seen == [(zmq.PULL, ep), (zmq.PUSH, ep)]


def test_every_refused_message_reaches_on_reject_with_its_reason_and_size(ctx: zmq.Context) -> None:
    ep = inproc_endpoint(new_namespace(), 4)
    refused: list[Rejected] = []
    with Mailbox(ctx, ep, max_bytes=1000, on_reject=refused.append) as box, Outbox(ctx) as out:
        raw = ctx.socket(zmq.PUSH)
        raw.connect(ep)
        raw.send_multipart([b"a" * 10, b"b" * 20, b"c" * 30])
        raw.close(0)
        assert out.send(ep, b"y" * 1001)
        assert out.send(ep, b"fine")
        assert box.drain() == [b"fine"]
    assert refused == [Rejected(REJECT_MULTIPART, 60, None), Rejected(REJECT_OVERSIZED, 1001, None)]


def test_refused_messages_name_the_curve_peer_that_sent_them(tmp_path, ctx: zmq.Context) -> None:
    from p2pfed.peer.keys import AllowlistAuthenticator, load_pair, load_public, make_keys, server_configurer

    make_keys(tmp_path, ["server", "peer-7"])
    auth = AllowlistAuthenticator(ctx, {load_public(tmp_path / "peer-7.key"): 7})
    auth.start()
    refused: list[Rejected] = []
    try:
        with Mailbox(ctx, "tcp://127.0.0.1:0", configure=server_configurer(*load_pair(tmp_path / "server.key_secret")),
                     on_reject=refused.append) as box:
            sock = ctx.socket(zmq.PUSH)
            sock.linger = 0
            sock.curve_serverkey = load_public(tmp_path / "server.key")
            sock.curve_publickey, sock.curve_secretkey = load_pair(tmp_path / "peer-7.key_secret")
            sock.connect(box.endpoint)
            sock.send_multipart([b"x", b"y"])
            sock.send(b"ok")
            assert box.receive(timeout_ms=5000) == b"ok"
            sock.close(0)
    finally:
        auth.stop()
    assert refused == [Rejected(REJECT_MULTIPART, 2, "7")]


def test_tcp_ports_beyond_65535_are_refused_not_wrapped(ctx: zmq.Context) -> None:
    with pytest.raises(ValueError, match="tcp port must be in 0..65535"):
        Mailbox(ctx, "tcp://127.0.0.1:99999")
    with Outbox(ctx) as out, pytest.raises(ValueError, match="tcp port"):
        out.send("tcp://127.0.0.1:65536", b"x")
