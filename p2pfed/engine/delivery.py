"""The last hop of every simulated message: bytes through ZeroMQ, then the receiver's intake.

Both simulated runtimes (synchronous rounds and opportunistic contacts) decide *when* bytes
arrive; this module pushes them through a real inproc PUSH/PULL pair and hands what came out to
the receiving device's ``Intake`` (``p2pfed.device``), the same intake a real peer uses, so a bad
message is caught exactly where a real peer would catch it.

Three things keep the cost of a message flat in the number of devices and receivers:

- one routed socket pair (:class:`~p2pfed.transport.inproc.RoutedInprocNetwork`) carries every
  device's frames, so 10,000 devices never meet ZeroMQ's limit of 1,023 sockets per context;
- a broadcast passes through the sockets once for all its receivers (``carry`` with every
  destination), then waits on each simulated link until its last byte arrives there;
- an encoded message travels as one :class:`Frame` object on every link it takes, decoded at
  most once, and what methods derive from it (``Frame.memo``, e.g. FedSub's dense subnetwork
  copy) is kept with it: memory grows with messages, not with messages x receivers, and nothing
  has to guess how long to keep a decoded copy (the frame goes when its last link has delivered
  it). Every other intake check runs for each receiver; the method's own check runs against each
  receiver's model, and a method may keep its checked result in the memo for the receivers whose
  models have the same shapes (FedSub does: the check's outcome depends on nothing else).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from p2pfed.algorithms import Algorithm, Received
from p2pfed.device import Intake, IntakeRules
from p2pfed.device.exchange import Frame as Frame   # re-exported: the runtime's frames
from p2pfed.results.recorder import Recorder
from p2pfed.transport.inproc import RoutedInprocNetwork


class Delivery:
    """Carry encoded frames to the devices' intakes (one per device, built here)."""

    def __init__(self, algorithms: Sequence[Algorithm], recorder: Recorder, rules: IntakeRules, *,
                 devices: Sequence[int] | None = None) -> None:
        """``devices``: the ids of ``algorithms`` (default: 0, 1, ... in order; a shard's own
        devices where a run is split over processes, among ``rules.num_devices``)."""
        ids = list(range(len(algorithms))) if devices is None else list(devices)
        self.intakes = [Intake(i, algo, recorder, rules) for i, algo in zip(ids, algorithms, strict=True)]
        self.slot = {d: k for k, d in enumerate(ids)}   # device id -> its intake's index
        size = len(algorithms) if devices is None else (rules.num_devices or max(ids, default=-1) + 1)
        self.network = RoutedInprocNetwork(size, rules.max_message_bytes)
        self.max_bytes = rules.max_message_bytes
        self.decoded = 0   # frames decoded (once each, whatever their number of receivers)

    def carry(self, frame: Frame, destinations: Sequence[int]) -> Frame | None:
        """Push ``frame`` through the sockets once for all ``destinations``; the frame they will
        take — the same object when the bytes came out unchanged, so its decode is shared — or
        None if the sockets refused it."""
        raw = self.network.broadcast(destinations, frame.data)
        if raw is None:
            return None
        return frame if raw == frame.data else Frame(raw)

    def take(self, src: int, dst: int, frame: Frame | None, now: float, round: int) -> Received | None:
        """``dst``'s intake takes a carried frame from the link with ``src``; the item it cached,
        or None if it was dropped (``round``: the round, or evaluation interval, a drop is
        counted in). A None frame is one the sockets refused."""
        if frame is None:
            self.intakes[self.slot[dst]].refuse(src, round, "transport", "mailbox did not receive the frame")
            return None
        tried = frame._tried
        msg = frame.message(self.max_bytes)
        self.decoded += not tried and msg is not None
        # simulated intakes never hold later rounds (real peers do), so never return Held or ResendRequest
        return cast("Received | None", self.intakes[self.slot[dst]].take(frame.data, link=src, now=now, round=round,
                                                              decoded=msg, memo=frame.memo))

    def deliver(self, src: int, dst: int, frame: Frame | bytes, now: float, round: int) -> Received | None:
        """One link's transfer, through the sockets and into ``dst``'s intake at once."""
        frame = frame if isinstance(frame, Frame) else Frame(frame)
        return self.take(src, dst, self.carry(frame, [dst]), now, round)

    def close(self) -> None:
        self.network.close()
