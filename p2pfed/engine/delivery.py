"""The last hop of every simulated message: bytes through ZeroMQ, then the receiver's intake.

Both simulated runtimes (synchronous rounds and opportunistic contacts) decide *when* bytes
arrive; this module pushes them through a real inproc PUSH/PULL pair and hands what came out to
the receiving device's ``Intake`` (``p2pfed.device``), the same intake a real peer uses, so a bad
message is caught exactly where a real peer would catch it.

Two things keep the cost of a message flat in the number of devices and receivers:

- one routed socket pair (:class:`~p2pfed.transport.inproc.RoutedInprocNetwork`) carries every
  device's frames, so 10,000 devices never meet ZeroMQ's limit of 1,023 sockets per context;
- a message broadcast to k neighbours is decoded once: when the bytes that came out of the socket
  equal the sender's bytes, the receivers share one decoded, read-only copy (views into the
  sender's buffer), so memory grows with messages, not with messages x receivers. Every other
  intake check, the algorithm's own shape check included, still runs for each receiver.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from p2pfed.algorithms import Algorithm, Received
from p2pfed.device import Intake, IntakeRules
from p2pfed.results.recorder import Recorder
from p2pfed.transport import CodecError, Message, decode
from p2pfed.transport.inproc import RoutedInprocNetwork

DECODED_KEPT = 128   # recent broadcasts whose decoded copy is kept for their next receivers


class SharedDecoder:
    """One decoded copy per sent buffer, for all the receivers of a broadcast.

    Keyed by the identity of the sender's ``bytes`` object (the runtimes queue the same object on
    every link of a broadcast); an entry keeps that object alive, so the identity cannot be
    reused while it is cached. Used only for bytes that arrived equal to what was sent; a message
    that does not decode is not cached (each receiver's intake refuses it itself).
    """

    def __init__(self, max_bytes: int, kept: int = DECODED_KEPT) -> None:
        self.max_bytes = max_bytes
        self.kept = kept
        self._entries: OrderedDict[int, tuple[bytes, Message]] = OrderedDict()
        self.decoded = 0   # decodes done here
        self.shared = 0    # receivers served from an earlier decode

    def get(self, sent: bytes, arrived: bytes) -> Message | None:
        """The decoded message if ``arrived`` is byte-for-byte ``sent`` and decodes, else None."""
        if arrived != sent:
            return None
        entry = self._entries.get(id(sent))
        if entry is not None and entry[0] is sent:
            self._entries.move_to_end(id(sent))
            self.shared += 1
            return entry[1]
        try:
            msg = decode(sent, max_bytes=self.max_bytes)
        except CodecError:
            return None
        self.decoded += 1
        self._entries[id(sent)] = (sent, msg)
        while len(self._entries) > self.kept:
            self._entries.popitem(last=False)
        return msg

    def clear(self) -> None:
        self._entries.clear()


class Delivery:
    """Carry encoded messages to the devices' intakes (one per device, built here)."""

    def __init__(self, algorithms: Sequence[Algorithm], recorder: Recorder, rules: IntakeRules) -> None:
        self.intakes = [Intake(i, algo, recorder, rules) for i, algo in enumerate(algorithms)]
        self.network = RoutedInprocNetwork(len(algorithms), rules.max_message_bytes)
        self.decoder = SharedDecoder(rules.max_message_bytes)

    def deliver(self, src: int, dst: int, data: bytes, now: float, round: int) -> Received | None:
        """The item cached by ``dst``, or None if it was dropped (``round``: the round, or
        evaluation interval, a drop is counted in)."""
        raw = self.network.carry(dst, data)
        if raw is None:
            self.intakes[dst].refuse(src, round, "transport", "mailbox did not receive the frame")
            return None
        return self.intakes[dst].take(raw, link=src, now=now, round=round,
                                      decoded=self.decoder.get(data, raw))

    def close(self) -> None:
        self.decoder.clear()
        self.network.close()
