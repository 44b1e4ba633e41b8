"""ZeroMQ channels: one PULL inbox per device, PUSH sockets towards peers.

Why real sockets even in simulation: the simulator and real peers then share
the framing, queueing and size limits; only the endpoint scheme differs
(``inproc://`` in one process, ``tcp://`` between processes).

One message is one single-frame ZeroMQ message holding an encoded blob (see
:mod:`p2pfed.transport.codec`). Sockets are not thread-safe: use a Mailbox or
Outbox from one thread only. ``inproc://`` needs the Mailbox and Outbox to share
one ``zmq.Context``.

Extension point: both classes take ``configure(socket, endpoint)``, called before
bind/connect. Security (e.g. CURVE keys, a per-peer server key for the Outbox)
is added there without touching the send/receive paths.

Every message that reaches a Mailbox is either returned by a receive call or
refused there (multipart, or larger than ``max_bytes``): a refusal is counted in
``Mailbox.stats`` and handed, as a :class:`Rejected`, to the ``on_reject``
callback, so the caller can count it as a dropped message with its reason and
sender. Over tcp/ipc ZeroMQ itself cuts a connection that sends more than
``max_bytes``; such a message never reaches the mailbox (its sender loses it).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import zmq

from p2pfed.transport.codec import DEFAULT_MAX_BYTES

__all__ = [
    "ChannelStats",
    "Mailbox",
    "Outbox",
    "REJECT_MULTIPART",
    "REJECT_OVERSIZED",
    "Rejected",
    "SocketConfigurer",
    "inproc_endpoint",
    "new_namespace",
]

SocketConfigurer = Callable[[zmq.Socket, str], None]
"""Hook run on each new socket before bind/connect, e.g. to set CURVE keys."""

_ENDPOINT_RE = re.compile(r"(inproc|tcp|ipc)://\S+")
_TCP_PORT_RE = re.compile(r"tcp://.*:(\d+)")
MAX_TCP_PORT = 65535
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
ZERO_COPY_MIN_BYTES = 64 * 1024  # below this a copy is cheaper than zero-copy bookkeeping


def _check_endpoint(endpoint: str) -> str:
    if not isinstance(endpoint, str) or not _ENDPOINT_RE.fullmatch(endpoint):
        raise ValueError(f"endpoint must look like inproc://..., tcp://host:port or ipc://..., got {endpoint!r}")
    port = _TCP_PORT_RE.fullmatch(endpoint)
    if port and int(port.group(1)) > MAX_TCP_PORT:  # ZeroMQ would wrap it silently to another port
        raise ValueError(f"endpoint {endpoint!r}: tcp port must be in 0..{MAX_TCP_PORT}")
    return endpoint


def new_namespace() -> str:
    """A fresh namespace, so two simulation runs in one process never share endpoints."""
    return uuid.uuid4().hex


def inproc_endpoint(namespace: str, device_id: int) -> str:
    """The inproc endpoint of ``device_id`` within one simulation run's ``namespace``."""
    if not isinstance(namespace, str) or not _NAMESPACE_RE.fullmatch(namespace):
        raise ValueError(f"namespace must match [A-Za-z0-9_.-]{{1,128}}, got {namespace!r}")
    if type(device_id) is not int or device_id < 0:
        raise ValueError(f"device_id must be a non-negative int, got {device_id!r}")
    return f"inproc://p2pfed.{namespace}.{device_id}"


@dataclass
class ChannelStats:
    """Running totals of what a socket passed on, dropped or could not deliver. A Mailbox also
    reports each refused message to its ``on_reject`` callback, which is how a caller counts
    them in its results (with a reason and the sender)."""

    received: int = 0
    sent: int = 0
    send_failed: int = 0
    rejected_multipart: int = 0
    rejected_oversized: int = 0


REJECT_MULTIPART = "multipart"
REJECT_OVERSIZED = "oversized"


@dataclass(frozen=True)
class Rejected:
    """A message a Mailbox refused before anyone decoded it."""

    reason: str          # REJECT_MULTIPART or REJECT_OVERSIZED
    nbytes: int          # its size, all parts together
    sender: str | None   # the ZAP User-Id of its connection (a CURVE peer's id), None if unauthenticated


RejectHandler = Callable[[Rejected], None]


def user_id(frame: zmq.Frame) -> str | None:
    """The ZAP User-Id a frame arrived with (set by an authenticator), or None."""
    try:
        value = cast("str | None", frame.get("User-Id"))   # a text property
    except (zmq.ZMQError, ValueError, TypeError):
        return None
    return value or None


def close_bound(socket: zmq.Socket, endpoint: str) -> None:
    """Close a bound socket at once, unbinding first: ``close()`` alone frees the endpoint later,
    asynchronously, and a new socket binding it at once would fail."""
    try:
        socket.unbind(endpoint)
    except zmq.ZMQError:
        pass
    socket.close(0)


class Mailbox:
    """A device's inbox: one PULL socket bound at an endpoint."""

    def __init__(
        self,
        context: zmq.Context,
        endpoint: str,
        *,
        rcvhwm: int = 1000,
        max_bytes: int = DEFAULT_MAX_BYTES,
        configure: SocketConfigurer | None = None,
        on_reject: RejectHandler | None = None,
    ) -> None:
        """``on_reject`` is called, on the receiving thread, once per refused message."""
        _check_endpoint(endpoint)
        self.max_bytes = max_bytes
        self.stats = ChannelStats()
        self.on_reject = on_reject
        self._socket: zmq.Socket | None = context.socket(zmq.PULL)
        try:
            self._socket.setsockopt(zmq.LINGER, 0)
            self._socket.setsockopt(zmq.RCVHWM, rcvhwm)
            # tcp/ipc peers sending more are disconnected by zmq; inproc bypasses
            # this limit, so receive() checks the size again.
            self._socket.setsockopt(zmq.MAXMSGSIZE, max_bytes)
            if configure is not None:
                configure(self._socket, endpoint)
            try:
                self._socket.bind(endpoint)
            except zmq.ZMQError as exc:
                raise ValueError(f"cannot bind mailbox at {endpoint!r}: {exc}") from exc
            last = self._socket.getsockopt(zmq.LAST_ENDPOINT)
            self.endpoint: str = last.decode() if isinstance(last, bytes) and last else endpoint
        except BaseException:
            self._socket.close(0)
            self._socket = None
            raise

    def _sock(self) -> zmq.Socket:
        if self._socket is None:
            raise RuntimeError(f"mailbox {self.endpoint!r} is closed")
        return self._socket

    def _take(self) -> zmq.Frame | None:
        """One well-formed frame, or None if nothing is queued; drops bad ones."""
        sock = self._sock()
        while True:
            try:
                frame = sock.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return None
            if sock.getsockopt(zmq.RCVMORE):
                nbytes = len(frame)
                while sock.getsockopt(zmq.RCVMORE):  # rest of the message is already queued
                    nbytes += len(sock.recv(zmq.NOBLOCK, copy=False))
                self.stats.rejected_multipart += 1
                self._reject(REJECT_MULTIPART, nbytes, frame)
                continue
            if len(frame) > self.max_bytes:
                self.stats.rejected_oversized += 1
                self._reject(REJECT_OVERSIZED, len(frame), frame)
                continue
            self.stats.received += 1
            return frame

    def _reject(self, reason: str, nbytes: int, frame: zmq.Frame) -> None:
        if self.on_reject is not None:
            self.on_reject(Rejected(reason, nbytes, user_id(frame)))

    def receive_frame(self, timeout_ms: int = 0) -> zmq.Frame | None:
        """Like ``receive`` but the zmq.Frame itself, whose ``get("User-Id")`` names the
        authenticated sender when a ZAP handler (CURVE) is active."""
        frame = self._take()
        if frame is not None or timeout_ms <= 0:
            return frame
        deadline = time.monotonic() + timeout_ms / 1000
        sock = self._sock()
        while True:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not sock.poll(left_ms, zmq.POLLIN):
                return self._take()
            frame = self._take()
            if frame is not None:
                return frame

    def receive(self, timeout_ms: int = 0) -> bytes | None:
        """One message, waiting up to ``timeout_ms`` (0: don't wait); None if none came."""
        frame = self.receive_frame(timeout_ms)
        return None if frame is None else frame.bytes

    def drain(self) -> list[bytes]:
        """Everything queued right now, without waiting."""
        out: list[bytes] = []
        while (frame := self._take()) is not None:
            out.append(frame.bytes)
        return out

    def close(self) -> None:
        """Close immediately, discarding anything still queued (idempotent)."""
        if self._socket is not None:
            close_bound(self._socket, self.endpoint)
            self._socket = None

    def __enter__(self) -> Mailbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Outbox:
    """PUSH sockets to peers, connected lazily, one per destination endpoint.

    ``send`` returning True means the message was queued for the peer, not that
    it arrived: like a real network, a peer that is down or never binds loses it.
    """

    def __init__(
        self,
        context: zmq.Context,
        *,
        sndhwm: int = 1000,
        linger_ms: int = 0,
        send_timeout_ms: int = 1000,
        configure: SocketConfigurer | None = None,
    ) -> None:
        self._context = context
        self._sndhwm = sndhwm
        self._linger_ms = linger_ms
        self.send_timeout_ms = send_timeout_ms
        self._configure = configure
        self._sockets: dict[str, zmq.Socket] = {}
        self._closed = False
        self.stats = ChannelStats()

    def _socket_for(self, endpoint: str) -> zmq.Socket:
        if self._closed:
            raise RuntimeError("outbox is closed")
        sock = self._sockets.get(endpoint)
        if sock is None:
            _check_endpoint(endpoint)
            sock = self._context.socket(zmq.PUSH)
            try:
                sock.setsockopt(zmq.LINGER, self._linger_ms)
                sock.setsockopt(zmq.SNDHWM, self._sndhwm)
                if self._configure is not None:
                    self._configure(sock, endpoint)
                sock.connect(endpoint)
            except zmq.ZMQError as exc:
                sock.close(0)
                raise ValueError(f"cannot connect to peer {endpoint!r}: {exc}") from exc
            except BaseException:
                sock.close(0)
                raise
            self._sockets[endpoint] = sock
        return sock

    def send(self, endpoint: str, data: bytes, *, timeout_ms: int | None = None) -> bool:
        """Queue ``data`` for ``endpoint``; False if the peer's queue stays full past the timeout.

        ``timeout_ms`` overrides ``send_timeout_ms`` (a single-threaded simulator
        should pass 0, since nothing can drain the peer while it waits).
        """
        sock = self._socket_for(endpoint)
        wait = self.send_timeout_ms if timeout_ms is None else timeout_ms
        copy = len(data) < ZERO_COPY_MIN_BYTES
        try:
            sock.send(data, zmq.NOBLOCK, copy=copy)
        except zmq.Again:
            try:
                if wait <= 0 or not sock.poll(wait, zmq.POLLOUT):
                    self.stats.send_failed += 1
                    return False
                sock.send(data, zmq.NOBLOCK, copy=copy)
            except zmq.Again:
                self.stats.send_failed += 1
                return False
        self.stats.sent += 1
        return True

    def disconnect(self, endpoint: str) -> None:
        """Forget a peer, dropping whatever is still queued for it."""
        sock = self._sockets.pop(endpoint, None)
        if sock is not None:
            sock.close(0)

    @property
    def peers(self) -> list[str]:
        """Endpoints with an open PUSH socket."""
        return list(self._sockets)

    def close(self) -> None:
        """Close every peer socket (idempotent; linger as configured, default 0)."""
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()
        self._closed = True

    def __enter__(self) -> Outbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
