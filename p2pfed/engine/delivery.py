"""The last hop of every simulated message: bytes through ZeroMQ, decode, check, hand over, count.

Both runtimes (synchronous rounds and opportunistic contacts) decide *when* bytes arrive; this
module is the one place that decides *what* arrives. A frame goes through a real inproc PUSH/PULL
pair, is decoded by the wire codec, checked against the link it came over, and given to the
receiving algorithm, so a bad message is caught exactly where a real peer would catch it.

A message carried by a relay (store-carry-forward) names the relay as ``sender`` and the device
that made it in ``meta['relay']`` (``origin``, ``hops``); the receiver caches it under the origin
with the origin's round and ``sent_at``, so its age is the age of the artifact, not of the hop.
"""

from __future__ import annotations

from typing import Any

import zmq

from p2pfed.algorithms.base import Algorithm, ArtifactError, Payload, Received
from p2pfed.results.recorder import Recorder
from p2pfed.transport import CodecError, Mailbox, Message, Outbox, decode, encode, inproc_endpoint, new_namespace

RELAY_KEY = "relay"


class InprocNetwork:
    """One ZeroMQ inproc mailbox per device, and one outbox that reaches them all."""

    def __init__(self, num_devices: int, max_message_bytes: int) -> None:
        self.context = zmq.Context.instance()
        namespace = new_namespace()
        self.endpoints = [inproc_endpoint(namespace, i) for i in range(num_devices)]
        self.mailboxes = [Mailbox(self.context, ep, max_bytes=max_message_bytes) for ep in self.endpoints]
        self.outbox = Outbox(self.context)

    def carry(self, dst: int, data: bytes) -> bytes | None:
        """Push bytes through the sockets to ``dst`` and return what its mailbox received."""
        # One thread drives every socket here: waiting on a full queue could never end well.
        if not self.outbox.send(self.endpoints[dst], data, timeout_ms=0):
            return None
        return self.mailboxes[dst].receive(timeout_ms=100)

    def close(self) -> None:
        self.outbox.close()
        for m in self.mailboxes:
            m.close()


def encode_share(kind: str, sender: int, round: int, sent_at: float, payload: Payload,
                 max_bytes: int, relay: dict[str, int] | None = None) -> bytes:
    """A payload on the wire; ``relay`` marks a copy carried on behalf of its ``origin``."""
    meta = payload.meta if relay is None else {**payload.meta, RELAY_KEY: relay}
    return encode(Message(kind=kind, sender=sender, round=round, sent_at=sent_at, meta=meta,
                          tensors=payload.tensors), max_bytes=max_bytes)


class Delivery:
    """Deliver encoded messages to the algorithms, counting what arrives and what is dropped."""

    def __init__(self, algorithms: list[Algorithm], recorder: Recorder, max_message_bytes: int,
                 hop_limit: int = 1) -> None:
        self.algorithms = algorithms
        self.recorder = recorder
        self.max_message_bytes = max_message_bytes
        self.hop_limit = hop_limit
        self.network = InprocNetwork(len(algorithms), max_message_bytes)

    def deliver(self, src: int, dst: int, data: bytes, now: float, round: int) -> Received | None:
        """The received item handed to ``dst``'s algorithm, or None if it was dropped
        (``round``: the round, or evaluation interval, the drop is counted in)."""
        raw = self.network.carry(dst, data)
        if raw is None:
            self.recorder.dropped(src, dst, round, "transport", "mailbox did not receive the frame")
            return None
        try:
            msg = decode(raw, max_bytes=self.max_message_bytes)
            if msg.sender != src:
                raise ArtifactError(f"claims to be from peer {msg.sender}")
            meta = dict(msg.meta)
            origin, hops = self._route(meta.pop(RELAY_KEY, None), src, dst)
            item = Received(sender=origin, round=msg.round, sent_at=msg.sent_at, received_at=now,
                            payload=Payload(meta, dict(msg.tensors)), hops=hops)
            self.algorithms[dst].receive(item)
        except CodecError as exc:
            self.recorder.dropped(src, dst, round, f"codec:{exc.reason}", str(exc))
            return None
        except ArtifactError as exc:
            self.recorder.dropped(src, dst, round, "artifact", str(exc))
            return None
        self.recorder.delivered(dst, len(raw))
        return item

    def _route(self, relay: Any, src: int, dst: int) -> tuple[int, int]:
        if relay is None:
            return src, 1
        if self.hop_limit <= 1:
            raise ArtifactError("carries a relayed artifact but forwarding is off")
        n = len(self.algorithms)
        origin, hops = (relay.get("origin"), relay.get("hops")) if isinstance(relay, dict) else (None, None)
        if not isinstance(origin, int) or not 0 <= origin < n or origin in (src, dst):
            raise ArtifactError(f"meta 'relay.origin' must be another peer id, got {origin!r}")
        if not isinstance(hops, int) or not 2 <= hops <= self.hop_limit:
            raise ArtifactError(f"meta 'relay.hops' must be in 2..{self.hop_limit}, got {hops!r}")
        return origin, hops

    def close(self) -> None:
        self.network.close()
