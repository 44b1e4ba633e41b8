"""How the two sides of a contact learn what the other holds and when a transfer is complete,
as two strategies behind one interface.

``ideal`` (the default): a device reads its peer's summary vector directly and a transfer is
complete when its last byte arrives (latency + size / bandwidth). ``acknowledged``: the
simulator runs real peers' protocol: each side sends its summary vector when the contact opens
and waits for the other's, a transfer is complete when the receiver's acknowledgement is back,
and every message takes its place in one queue per direction with its framing bytes
(``engine.contact_lines``, ``device.contact_protocol``): an acknowledgement lost to the
contact's end leaves the transfer aborted on the sender's side though the receiver has it, as
between real peers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol as Interface

import simpy

from p2pfed.device.contact_protocol import acknowledgement, summary_vector
from p2pfed.device.exchange import Holdings, Offer, PartKey, Version, mark_received
from p2pfed.engine.contact_checkpoint import have_from_state, have_state
from p2pfed.engine.contact_lines import ContactLines, Direction
from p2pfed.engine.contact_world import ContactWorld
from p2pfed.network.contacts import Contact, ContactPlan


@dataclass(eq=False)
class Wait:
    """What a session waits on: ``down`` (either end offline), ``idle`` (nothing to send),
    ``transfer`` (its ``offer``, begun at ``started``, arriving with ``done`` at ``until``), and with
    the acknowledged protocol ``summary`` (the peer's summary vector) and ``ack`` (the offer's
    acknowledgement on its way back)."""

    kind: str
    offer: Offer | None = None
    started: float = 0.0
    done: simpy.Event | None = None
    seq: int = -1                       # order in which the session began waiting
    until: float = 0.0                  # when ``done`` fires

    def ends_at(self, env: simpy.Environment, t: float) -> None:
        """The wait ends at ``t`` (``until`` as SimPy computes the timeout's time, to the bit)."""
        now = float(env.now)
        delay = t - now
        self.until, self.done = now + delay, env.timeout(delay)


class TransferSteps(Interface):
    """What a protocol asks of the sessions while it completes a transfer."""

    def arrives(self, src: int, dst: int, wait: Wait, contact: Contact,
                end: simpy.Event) -> Generator[simpy.Event, Any, bool]: ...

    def cut(self, src: int, dst: int, wait: Wait, contact: Contact, end: simpy.Event) -> None: ...

    def completed(self, src: int, dst: int, wait: Wait, dst_have: dict[PartKey, Version]) -> None: ...

    def deliver(self, src: int, dst: int, offer: Offer) -> None: ...


class ContactProtocol(ABC):
    """One contact protocol; ``holdings``: every device's, what a summary vector describes."""

    def __init__(self, world: ContactWorld, plan: ContactPlan, holdings: list[Holdings], max_message_bytes: int):
        self.world = world
        self.plan = plan
        self.holdings = holdings
        self.max_message_bytes = max_message_bytes
        self.control = {"control_messages": 0, "control_bytes": 0}

    def opened(self, src: int, dst: int, index: int) -> Wait | None:
        """Session ``src`` -> ``dst`` of contact ``index`` opens: what it first waits on (None: nothing)."""
        return None

    @abstractmethod
    def peer_have(self, src: int, dst: int, index: int) -> dict[PartKey, Version]:
        """What ``src`` knows ``dst`` has."""

    @abstractmethod
    def arrival(self, direction: Direction, contact: Contact, size: int) -> float:
        """When a transfer of ``size`` bytes started now arrives."""

    @abstractmethod
    def taken_in(self, steps: TransferSteps, src: int, dst: int, wait: Wait, index: int,
                 end: simpy.Event) -> Generator[simpy.Event, Any, None]:
        """The offer's last byte arrived (or, restored, its acknowledgement is on its way): complete it."""

    def session_closed(self, key: Direction) -> None:
        """Session ``key`` ended."""

    def contact_closed(self, index: int) -> None:
        """Contact ``index`` ended."""

    def session_state(self, key: Direction) -> dict[str, Any]:
        return {}

    def load_session_state(self, key: Direction, saved: dict[str, Any]) -> None:
        """Put back what ``session_state`` saved."""

    def state_dict(self) -> dict[str, Any]:
        return {"control": dict(self.control)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.control = {k: int(v) for k, v in state.get("control", self.control).items()}


class IdealProtocol(ContactProtocol):
    """Summary vectors read directly, transfers complete when their last byte arrives."""

    def peer_have(self, src: int, dst: int, index: int) -> dict[PartKey, Version]:
        return self.holdings[dst].have

    def arrival(self, direction: Direction, contact: Contact, size: int) -> float:
        return self.world.now() + (8.0 * size / contact.bandwidth_bps + contact.latency_s)

    def taken_in(self, steps: TransferSteps, src: int, dst: int, wait: Wait, index: int,
                 end: simpy.Event) -> Generator[simpy.Event, Any, None]:
        assert wait.offer is not None
        steps.completed(src, dst, wait, self.holdings[dst].have)
        steps.deliver(src, dst, wait.offer)
        yield from ()


class AcknowledgedProtocol(ContactProtocol):
    """Real peers' summary vectors and acknowledgements, on one queue per direction of a contact."""

    def __init__(self, world: ContactWorld, plan: ContactPlan, holdings: list[Holdings], max_message_bytes: int):
        super().__init__(world, plan, holdings, max_message_bytes)
        self.lines = ContactLines()
        self.believed: dict[Direction, dict[PartKey, Version]] = {}   # each session's copy of its peer's

    def opened(self, src: int, dst: int, index: int) -> Wait | None:
        """The session first waits for ``dst``'s summary vector, sent as the contact opens."""
        c, now, have = self.plan.contacts[index], self.world.now(), self.holdings[dst].have
        self.believed[src, dst, index] = dict(have)
        wait = Wait("summary", started=now)
        wait.ends_at(self.world.env, self._send_control(
            (dst, src, index), summary_vector(dst, have, c.start, now, self.max_message_bytes)))
        return wait

    def _send_control(self, direction: Direction, data: bytes) -> float:
        """A protocol message on its way: when it arrives."""
        self.control["control_messages"] += 1
        self.control["control_bytes"] += len(data)
        return self.lines.send(direction, self.plan.contacts[direction[2]], self.world.now(), len(data))

    def peer_have(self, src: int, dst: int, index: int) -> dict[PartKey, Version]:
        return self.believed[src, dst, index]

    def arrival(self, direction: Direction, contact: Contact, size: int) -> float:
        return self.lines.send(direction, contact, self.world.now(), size)

    def taken_in(self, steps: TransferSteps, src: int, dst: int, wait: Wait, index: int,
                 end: simpy.Event) -> Generator[simpy.Event, Any, None]:
        """Taken in by the receiver, which acknowledges it on its own link (behind what it sends)."""
        contact, offer = self.plan.contacts[index], wait.offer
        assert offer is not None
        if wait.kind == "transfer":
            mark_received(self.holdings[dst].have, offer)
            steps.deliver(src, dst, offer)
            if end.processed:   # it arrived as the contact ended: no acknowledgement can cross
                steps.cut(src, dst, wait, contact, end)
                return
            now = self.world.now()
            msg = offer.frame.message(self.max_message_bytes)
            wait.kind = "ack"
            wait.ends_at(self.world.env, self._send_control(
                (dst, src, index), acknowledgement(dst, offer.frame.size, msg, now, self.max_message_bytes)))
        if (yield from steps.arrives(src, dst, wait, contact, end)):
            steps.completed(src, dst, wait, self.believed[src, dst, index])

    def session_closed(self, key: Direction) -> None:
        self.believed.pop(key, None)

    def contact_closed(self, index: int) -> None:
        self.lines.close(index)

    def session_state(self, key: Direction) -> dict[str, Any]:
        return {"peer_have": have_state(self.believed[key])} if key in self.believed else {}

    def load_session_state(self, key: Direction, saved: dict[str, Any]) -> None:
        if "peer_have" in saved:
            self.believed[key] = have_from_state(saved["peer_have"])

    def state_dict(self) -> dict[str, Any]:
        return {"lines": self.lines.state(), **super().state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lines = ContactLines.from_state(state.get("lines", []))
        super().load_state_dict(state)


PROTOCOL_CLASSES: dict[str, type[ContactProtocol]] = {"ideal": IdealProtocol, "acknowledged": AcknowledgedProtocol}
