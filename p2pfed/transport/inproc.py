"""The simulator's network: every device's frames through one ZeroMQ socket pair.

One inproc mailbox per device (two sockets each, with the outbox's PUSH) stopped simulations at
about 1,000 devices: a ZeroMQ context holds at most 1,023 sockets by default (``Too many open
files``). Here a fixed pair serves any number of devices: a PUSH socket sends each frame behind
a routing envelope naming its destinations, and one PULL socket receives it. Frames still pass
through real ZeroMQ sockets with the mailbox's checks (size limit, one payload frame per
message), so a bad frame is caught where a real peer would catch it. A broadcast passes through
once for all its receivers (``broadcast``), as a PUB socket fans one frame out: on a complete
graph of 36 devices that is 35x fewer socket round trips than one per receiver.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import zmq

from p2pfed.transport.channel import ZERO_COPY_MIN_BYTES, ChannelStats, close_bound, new_namespace

_ENVELOPE = struct.Struct(">QI")  # sequence number of the carry, number of destinations
_DESTINATION = struct.Struct(">I")   # then each destination device


class RoutedInprocNetwork:
    """``carry(dst, data)`` for ``num_devices`` devices over one PUSH/PULL pair (two sockets,
    whatever the number of devices).

    Each frame travels as a two-part message ``[envelope, payload]``; the envelope holds a
    sequence number and the destinations, so ``carry`` returns exactly the frame it sent, to the
    devices it named. What the receiving side rejects, as :class:`~p2pfed.transport.Mailbox`
    does: messages that are not one envelope plus one payload frame (``rejected_multipart``),
    payloads over ``max_message_bytes`` (``rejected_oversized``); and, routing being its job,
    frames for another device or an earlier carry (``misrouted``). Single-threaded, like the
    simulator that drives it.
    """

    def __init__(self, num_devices: int, max_message_bytes: int, *, context: zmq.Context | None = None,
                 hwm: int = 1000, receive_timeout_ms: int = 100) -> None:
        if num_devices < 0:
            raise ValueError(f"num_devices must be >= 0, got {num_devices}")
        self.num_devices = num_devices
        self.max_bytes = max_message_bytes
        self.receive_timeout_ms = receive_timeout_ms
        self.context = context if context is not None else zmq.Context.instance()
        self.endpoint = f"inproc://p2pfed.{new_namespace()}.routed"
        self.stats = ChannelStats()
        self.misrouted = 0
        self._seq = 0
        self._pull: zmq.Socket | None = None
        self._push: zmq.Socket | None = None
        try:
            self._pull = self.context.socket(zmq.PULL)
            self._pull.setsockopt(zmq.LINGER, 0)
            self._pull.setsockopt(zmq.RCVHWM, hwm)
            # the larger part is the payload or, for a broadcast to every device, the envelope
            self._pull.setsockopt(zmq.MAXMSGSIZE, max(max_message_bytes, _ENVELOPE.size
                                                      + _DESTINATION.size * num_devices))
            self._pull.bind(self.endpoint)
            self._push = self.context.socket(zmq.PUSH)
            self._push.setsockopt(zmq.LINGER, 0)
            self._push.setsockopt(zmq.SNDHWM, hwm)
            self._push.connect(self.endpoint)
        except BaseException:
            self.close()
            raise

    @property
    def sockets(self) -> int:
        """Open ZeroMQ sockets held (2 while open, 0 once closed), independent of devices."""
        return sum(s is not None for s in (self._pull, self._push))

    def carry(self, dst: int, data: bytes) -> bytes | None:
        """Send ``data`` to device ``dst`` through the sockets; what arrived there, or None if
        the frame could not be queued or was rejected on arrival."""
        return self.broadcast([dst], data)

    def broadcast(self, destinations: Sequence[int], data: bytes) -> bytes | None:
        """Send ``data`` once to every device of ``destinations``; what arrived, or None."""
        for dst in destinations:
            if type(dst) is not int or not 0 <= dst < self.num_devices:
                raise ValueError(f"destination must be a device id in 0..{self.num_devices - 1}, got {dst!r}")
        push = self._open(self._push)
        self._seq += 1
        envelope = _ENVELOPE.pack(self._seq, len(destinations)) + b"".join(
            _DESTINATION.pack(d) for d in destinations)
        try:  # one thread drives both ends: waiting on a full queue could never end
            push.send_multipart([envelope, data], zmq.NOBLOCK, copy=len(data) < ZERO_COPY_MIN_BYTES)
        except zmq.Again:
            self.stats.send_failed += 1
            return None
        self.stats.sent += 1
        return self._receive(envelope)

    def _receive(self, envelope: bytes) -> bytes | None:
        pull = self._open(self._pull)
        while pull.poll(self.receive_timeout_ms, zmq.POLLIN):
            parts = pull.recv_multipart(zmq.NOBLOCK, copy=False)
            if len(parts) != 2 or len(parts[0]) < _ENVELOPE.size:
                self.stats.rejected_multipart += 1
                continue
            if parts[0].bytes != envelope:
                self.misrouted += 1  # for other devices, or left over from an earlier carry
                continue
            if len(parts[1]) > self.max_bytes:
                self.stats.rejected_oversized += 1
                return None
            self.stats.received += 1
            return parts[1].bytes
        return None

    def _open(self, sock: zmq.Socket | None) -> zmq.Socket:
        if sock is None:
            raise RuntimeError("the network is closed")
        return sock

    def close(self) -> None:
        """Close both sockets, discarding anything queued (idempotent)."""
        if self._pull is not None:
            close_bound(self._pull, self.endpoint)
            self._pull = None
        if self._push is not None:
            self._push.close(0)
            self._push = None
