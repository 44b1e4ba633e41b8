"""Contacts and their sessions: each contact of the plan opens when it starts, with one session
per direction. A session runs one transfer at a time, in the send-policy order, at the contact's
bandwidth; a transfer that the contact's end (or either device going offline) interrupts is
aborted and its bytes on air are wasted, and nothing partial ever reaches an algorithm. Before
each transfer the devices compare summary vectors (what each holds, as in epidemic routing;
Vahdat & Becker 2000), so nothing a peer already has is sent again; how a side learns its peer's
vector and when a transfer is complete is the contact protocol's (``engine.contact_protocols``).
Everything that arrives goes through the receiver's intake, and may be kept to carry on."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np
import simpy

from p2pfed.device.exchange import Offer, PartKey, Version, mark_received
from p2pfed.engine.contact_availability import Availability
from p2pfed.engine.contact_checkpoint import Pending, offer_from_state, offer_state
from p2pfed.engine.contact_lines import Direction
from p2pfed.engine.contact_protocols import ContactProtocol, Wait
from p2pfed.engine.contact_schedule import AsyncSchedule
from p2pfed.engine.contact_store import Store
from p2pfed.engine.contact_world import ContactWorld
from p2pfed.engine.delivery import Delivery
from p2pfed.network.contacts import Contact, ContactPlan
from p2pfed.results.recorder import Recorder


class Sessions:
    """Every contact's sessions; ``interval``: the evaluation interval traffic is counted in."""

    def __init__(self, world: ContactWorld, plan: ContactPlan, schedule: AsyncSchedule, protocol: ContactProtocol,
                 store: Store, availability: Availability, delivery: Delivery, recorder: Recorder,
                 rng: np.random.Generator, interval: Callable[[], int]) -> None:
        self.world = world
        self.plan = plan
        self.schedule = schedule
        self.protocol = protocol
        self.store = store
        self.availability = availability
        self.energy = availability.energy
        self.delivery = delivery
        self.recorder = recorder
        self.rng = rng
        self.interval = interval
        self.contact_wait: tuple[int, simpy.Event] | None = None      # next contact to open, its start
        self.ends: dict[int, simpy.Event] = {}                          # open contacts' ends
        self.waits: dict[Direction, Wait] = {}                          # each session's, by (src, dst, contact)
        self.counter = itertools.count()

    def start(self) -> None:
        self.world.env.process(self._contacts())

    def _contacts(self, first: int = 0, wake: simpy.Event | None = None) -> Generator[simpy.Event, Any, None]:
        """Open each contact of the plan when it starts (a restored run: from contact ``first``)."""
        contacts, duration, env = self.plan.contacts, self.schedule.duration_s, self.world.env
        for index in range(first, len(contacts)):
            c = contacts[index]
            if c.start >= duration:
                break
            self.contact_wait = (index, wake if wake is not None else env.timeout(c.start - env.now))
            wake = None
            yield self.contact_wait[1]
            self._open(index, env.timeout(min(c.end, duration) - env.now))
        self.contact_wait = None

    def _open(self, index: int, end: simpy.Event) -> None:
        """Contact ``index`` is on until ``end``: a session each way."""
        c = self.plan.contacts[index]
        self._track_end(index, end)
        env = self.world.env
        env.process(self._session(c.a, c.b, index, end, self.protocol.opened(c.a, c.b, index)))
        env.process(self._session(c.b, c.a, index, end, self.protocol.opened(c.b, c.a, index)))

    def _track_end(self, index: int, end: simpy.Event) -> None:
        """Contact ``index`` is on until ``end`` (kept for a checkpoint while it lasts)."""
        self.ends[index] = end

        def ended(_: simpy.Event) -> None:
            self.ends.pop(index, None)
            self.protocol.contact_closed(index)
        end.callbacks.append(ended)

    def _session(self, src: int, dst: int, index: int, end: simpy.Event,
                 resume: Wait | None = None) -> Generator[simpy.Event, Any, None]:
        """One direction of contact ``index``: transfers one after the other until it ends
        (``resume``: a restored session's wait, taken up without deciding again)."""
        key, world = (src, dst, index), self.world
        while not end.processed:
            wait = resume if resume is not None else self._decide(src, dst, index)
            resume = None
            if wait is None:
                continue
            if wait.seq < 0:
                wait.seq = next(self.counter)
            self.waits[key] = wait
            if wait.kind in ("transfer", "ack"):
                yield from self._transfer(src, dst, wait, index, end)
            elif wait.kind == "summary":
                assert wait.done is not None
                yield wait.done | end
            elif wait.kind == "down":
                yield end | world.switched[src] | world.switched[dst]
            else:
                yield world.or_churn(end | world.news[src], world.switched[src], world.switched[dst])
        self.waits.pop(key, None)
        self.protocol.session_closed(key)

    def _decide(self, src: int, dst: int, index: int) -> Wait | None:
        """What a session does next: wait for both ends to be up, send its next offer, wait for
        one (None: a battery just ran out; decide again)."""
        up = self.availability
        if not (up.up(src) and up.up(dst)):
            return Wait("down")
        if self.energy is not None and not (up.has_energy(src) and up.has_energy(dst)):
            return None
        now = self.world.now()
        offer = self.store.next_offer(src, dst, self.protocol.peer_have(src, dst, index), now)
        return Wait("idle") if offer is None else Wait("transfer", offer, now)

    def _transfer(self, src: int, dst: int, wait: Wait, index: int,
                  end: simpy.Event) -> Generator[simpy.Event, Any, None]:
        """One transfer until it is complete or cut (a restored one: from the stage it was in)."""
        contact, offer = self.plan.contacts[index], wait.offer
        assert offer is not None
        if wait.kind == "transfer":
            if wait.done is None:   # a new transfer (a restored one has its end already)
                self.recorder.transfer_started(src)
                wait.ends_at(self.world.env, self.protocol.arrival((src, dst, index), contact, offer.frame.size))
            if not (yield from self.arrives(src, dst, wait, contact, end)):
                return
        yield from self.protocol.taken_in(self, src, dst, wait, index, end)

    def arrives(self, src: int, dst: int, wait: Wait, contact: Contact,
                end: simpy.Event) -> Generator[simpy.Event, Any, bool]:
        """Wait for the transfer's current stage to arrive; False (counted aborted, its bytes on
        air wasted) when the contact's end or a device going offline cuts it first."""
        assert wait.done is not None and wait.offer is not None
        world = self.world
        yield world.or_churn(wait.done | end, world.went_offline[src], world.went_offline[dst])
        if world.now() >= wait.until:
            return True
        self.cut(src, dst, wait, contact, end)
        return False

    def cut(self, src: int, dst: int, wait: Wait, contact: Contact, end: simpy.Event) -> None:
        """The transfer was cut now: aborted, its bytes on air wasted."""
        assert wait.offer is not None
        now = self.world.now()
        if self.energy is not None:   # both radios busy while the transfer lasted, cut or not
            self.energy.radio_busy(src, wait.started, now)
            self.energy.radio_busy(dst, wait.started, now)
        on_air = min(wait.offer.frame.size, int(contact.bandwidth_bps * (now - wait.started) / 8.0))
        self.recorder.transfer_aborted(src, dst, on_air, "contact ended" if end.processed else "device offline")

    def completed(self, src: int, dst: int, wait: Wait, dst_have: dict[PartKey, Version]) -> None:
        """The transfer is complete: counted as sent, and the receiver's summary vector notes it."""
        assert wait.offer is not None
        if self.energy is not None:
            self.energy.radio_busy(src, wait.started, self.world.now())
            self.energy.radio_busy(dst, wait.started, self.world.now())
        self.recorder.sent(src, wait.offer.frame.size, self.interval())
        self.recorder.transfer_completed(src)
        mark_received(dst_have, wait.offer)

    def deliver(self, src: int, dst: int, offer: Offer) -> None:
        """``offer`` reached ``dst``'s intake (unless the link's loss model drops it), and may be
        kept to carry on."""
        interval = self.interval()
        if self.schedule.loss_rate and self.rng.random() < self.schedule.loss_rate:
            self.recorder.lost(src, dst, offer.frame.size, interval)
            return
        item = self.delivery.deliver(src, dst, offer.frame, self.world.now(), interval)
        if item is not None and self.store.keep(dst, item):
            self.world.pulse(self.world.news, dst)

    # -- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The next contact to open, the open contacts' ends, and every session's wait."""
        pending = self.world.timeouts.pending
        sessions = []
        for (src, dst, contact), wait in sorted(self.waits.items(), key=lambda kv: kv[1].seq):
            entry: dict[str, Any] = {"src": src, "dst": dst, "contact": contact, "kind": wait.kind, "seq": wait.seq}
            if wait.done is not None:
                entry.update(started=wait.started, done=pending(wait.done))
            if wait.offer is not None:
                k = self.store.own_index(src, wait.offer)
                entry.update(offer={"own": k} if k is not None else offer_state(wait.offer))
            entry.update(self.protocol.session_state((src, dst, contact)))
            sessions.append(entry)
        return {"seq": next(self.counter),
                "contact": None if self.contact_wait is None else [self.contact_wait[0], pending(self.contact_wait[1])],
                "contact_ends": [[k, pending(ev)] for k, ev in sorted(self.ends.items())],
                "sessions": sessions}

    @staticmethod
    def pending(state: dict[str, Any]) -> Iterator[Pending]:
        if state["contact"] is not None:
            yield state["contact"][1]
        yield from (p for _, p in state["contact_ends"])
        yield from (s["done"] for s in state["sessions"] if "done" in s)

    def load_contacts(self, state: dict[str, Any]) -> None:
        """The process that opens contacts again, waiting on the next one."""
        self.counter = itertools.count(int(state["seq"]))
        if state["contact"] is not None:
            self.world.env.process(self._contacts(int(state["contact"][0]),
                                                  self.world.timeouts.event(state["contact"][1])))

    def load_sessions(self, state: dict[str, Any]) -> None:
        """The open contacts and their sessions again, each in the wait it was in (in the order
        they began waiting: they register on shared events alike)."""
        ev = self.world.timeouts.event
        ends = {int(k): ev(p) for k, p in state["contact_ends"]}
        for k, end in ends.items():
            self._track_end(k, end)
        for s in state["sessions"]:
            src, dst, index = int(s["src"]), int(s["dst"]), int(s["contact"])
            wait = Wait(s["kind"], seq=int(s["seq"]))
            if "done" in s:
                wait.started, wait.done, wait.until = float(s["started"]), ev(s["done"]), float(s["done"][0])
            if "offer" in s:
                o = s["offer"]
                wait.offer = self.store.holdings[src].own[int(o["own"])] if "own" in o else offer_from_state(o)
            self.protocol.load_session_state((src, dst, index), s)
            self.world.env.process(self._session(src, dst, index, ends[index], wait))
