"""The last hop of every simulated message: bytes through ZeroMQ, then the receiver's intake.

Both simulated runtimes (synchronous rounds and opportunistic contacts) decide *when* bytes
arrive; this module pushes them through a real inproc PUSH/PULL pair and hands what came out to
the receiving device's ``Intake`` (``p2pfed.device``), the same intake a real peer uses, so a bad
message is caught exactly where a real peer would catch it.
"""

from __future__ import annotations

from collections.abc import Sequence

import zmq

from p2pfed.algorithms import Algorithm, Received
from p2pfed.device import Intake, IntakeRules
from p2pfed.results.recorder import Recorder
from p2pfed.transport import Mailbox, Outbox, inproc_endpoint, new_namespace


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


class Delivery:
    """Carry encoded messages to the devices' intakes (one per device, built here)."""

    def __init__(self, algorithms: Sequence[Algorithm], recorder: Recorder, rules: IntakeRules) -> None:
        self.intakes = [Intake(i, algo, recorder, rules) for i, algo in enumerate(algorithms)]
        self.network = InprocNetwork(len(algorithms), rules.max_message_bytes)

    def deliver(self, src: int, dst: int, data: bytes, now: float, round: int) -> Received | None:
        """The item cached by ``dst``, or None if it was dropped (``round``: the round, or
        evaluation interval, a drop is counted in)."""
        raw = self.network.carry(dst, data)
        if raw is None:
            self.intakes[dst].refuse(src, round, "transport", "mailbox did not receive the frame")
            return None
        return self.intakes[dst].take(raw, link=src, now=now, round=round)

    def close(self) -> None:
        self.network.close()
