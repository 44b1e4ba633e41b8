"""A real peer over contacts: the contact runtime's protocol on a wall clock and tcp sockets.

The scenario's ``contacts`` (a trace, Poisson, random waypoint) say when two devices can talk;
every peer draws the same plan from the scenario's seed, and simulated time ``t`` is wall-clock
``start_time + t / speedup`` on every peer (the launcher gives them one ``start_time``). On the
emulated LAN (``p2pfed launch --network emulated``) a link carries packets only while its contact
lasts; on loopback the peers keep to the plan themselves.

The device is the simulator's: the same ``DeviceLoop`` steps every ``train_period_s`` (its first
step at the same phase as in the simulator), the same ``Intake`` takes every message in, the
same rules (``device.exchange``) pick what goes next in a contact and what is carried for
others. What a real peer must do that the simulator reads off its own state:

- **summary vectors**: when a contact opens each side sends what it has received (``contact/have``);
  a side sends nothing until the other's vector is in;
- **one transfer at a time, acknowledged**: the receiver acknowledges a transfer it took in
  whole (``contact/ack``), and only then is it counted complete (``transfers_completed``) and the
  next one sent; a transfer whose acknowledgement has not come a moment (``ACK_GRACE_S``) after the
  contact ended — the receiver did not take it in before the end — is aborted, its bytes on air
  (bandwidth × time from its start to the contact's end, at most its size) counted as wasted,
  exactly as the simulator counts them, and what is still queued for that peer is dropped with
  its socket;
- **nothing partial, nothing late**: a transfer that arrives when this peer has no open contact
  with its sender (it was cut) is discarded unacknowledged, never given to the algorithm. (One
  taken in just before the end whose acknowledgement the closing link then lost is counted aborted
  by its sender, though its receiver has it: the two sides cannot agree on it, as in any protocol.)
- **clocks read where peers meet**: every peer keeps to the shared start by its own clock, so when
  a contact opens with a peer whose clock it has not read well yet, it pings it (``peer/clock.py``:
  the link is up then) and reports the offsets in ``summary.json`` ``runtime.clock_offsets``. The
  pings are no part of the contact protocol: not counted in ``contact_protocol``.

The messages are built by ``device.contact_protocol``, which the simulator also uses when it models
this protocol (``contacts.protocol: acknowledged``); the comparison (``bench/contact_validation.py``)
measures what remains — connection set-up, TCP's resends across contacts, the peer's own compute
time — and what the network does.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import zmq

from p2pfed.algorithms import Received
from p2pfed.device import Control, DeviceLoop, Intake, IntakeRules
from p2pfed.device.exchange import (Forwarding, Frame, Holdings, Offer, Version, encode_carried, keep_to_carry,
                                    mark_received, next_offer, note_version)
from p2pfed.device.contact_protocol import acknowledgement, origin_of, summary_vector
from p2pfed.device.wire import CONTROL_KINDS, HAVE_KIND
from p2pfed.network.contacts import Contact
from p2pfed.peer.clock import CLOCK_KIND, CLOCK_KINDS
from p2pfed.peer.runtime import POLL_SLICE_S, Peer
from p2pfed.results.files import write_json
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.randomness import stream

log = logging.getLogger("p2pfed.peer")

ACK_GRACE_S = 1.0     # wall seconds an ended contact's last transfer may still be acknowledged
EARLY_HAVE_S = 2.0    # wall seconds a peer's summary vector may come before this peer opens the contact
START_MARGIN_S = 10.0  # launchers: simulated time 0 this long (plus a second per peer) after the files are written


def contact_start_time(peers: int) -> float:
    """The shared ``start_time`` a launcher gives peers over contacts or on a shared round grid:
    late enough that every peer has loaded its data and model and connected (they start together
    on one clock)."""
    return time.time() + START_MARGIN_S + 1.0 * peers


@dataclass
class Session:
    """This peer's side of one open contact: the peer's summary vector and the transfer in flight."""

    contact: Contact
    peer_have: dict[tuple[int, str], Version] | None = None
    offer: Offer | None = None
    started: float = 0.0
    sent_any: bool = False


class ContactPeer(Peer):
    """One device as a process over contacts (see the module's docstring)."""

    def _device(self, num_devices: int) -> tuple[Recorder, DeviceLoop, Intake]:
        cfg, sc = self.config, self.loaded.scenario
        a, fw = sc.asynchronous, sc.forwarding
        self.plan, self.duration = self.loaded.contacts
        self.speedup = cfg.speedup
        self.eval_every = sc.evaluation.every_s or self.duration / 20
        self.evaluations = int(math.ceil(self.duration / self.eval_every - 1e-9))
        self.forwarding = Forwarding(hop_limit=fw.hop_limit if fw.enabled else 1, parts=tuple(fw.parts),
                                     buffer_items=fw.buffer_items)
        # the simulator's first phases, drawn from the same stream; later jitter from this peer's own
        self.first_step = float(stream(sc.seed, "device-clocks").uniform(0, a.train_period_s, num_devices)[cfg.id])
        self.rng = stream(sc.seed, "peer-clock", cfg.id)
        self.holdings = Holdings()
        self.sessions: dict[int, Session] = {}
        # a peer's summary vector that came before this peer opened the contact: (contact, when, vector)
        self.early_have: dict[int, tuple[float, float, dict[tuple[int, str], Version]]] = {}
        self.closing: dict[int, tuple[Session, float, float]] = {}   # ended with a transfer unacknowledged
        self.contact_stats = {"control_messages": 0, "control_bytes": 0, "late_frames": 0, "stray_acks": 0,
                              "stale_summaries": 0}
        # simulated seconds a completed transfer took beyond the simulator's ideal model (8 size /
        # bandwidth + latency), from a contact's start to its first transfer, and a step or an
        # evaluation kept this peer from the network (the simulator's devices compute in no time)
        self.timing: dict[str, list[float]] = {"transfer_excess_s": [], "first_transfer_after_s": [], "busy_s": []}
        recorder = Recorder([cfg.id])
        loop = DeviceLoop(cfg.id, self.algo, recorder, clock=self.sim_now,
                          max_message_bytes=sc.engine.max_message_bytes, neighbours=lambda: sorted(self.sessions),
                          max_age_s=a.max_age_s, split_parts=a.send_policy != "whole", precision=sc.engine.precision,
                          signer=self.signing.signer)
        intake = Intake(cfg.id, self.algo, recorder,
                        IntakeRules(sc.engine.max_message_bytes, max_age_s=a.max_age_s,
                                    hop_limit=self.forwarding.hop_limit, num_devices=num_devices,
                                    max_bad_messages=cfg.max_bad_messages, contain_errors=True,
                                    control_kinds=CONTROL_KINDS | CLOCK_KINDS, keyring=self.signing.keyring),
                        is_neighbour=self.endpoints.__contains__, on_ignore=self._disconnect)
        return recorder, loop, intake

    # -- time ----------------------------------------------------------------------------------
    def sim_now(self) -> float:
        """Simulated seconds since the shared start."""
        return (self.wall.now() - self.start_time) * self.speedup

    def _interval(self, now: float) -> int:
        """The evaluation interval traffic is counted in (as the simulator's)."""
        return min(int(now // self.eval_every), max(self.evaluations - 1, 0))

    # -- the contact protocol ----------------------------------------------------------------
    def _control(self, peer: int, data: bytes) -> None:
        """Send ``peer`` a protocol message (``device.contact_protocol``)."""
        self.contact_stats["control_messages"] += 1
        self.contact_stats["control_bytes"] += len(data)
        if not self.outbox.send(self.endpoints[peer], data, timeout_ms=0):
            self.send_failed += 1

    def _open(self, c: Contact) -> None:
        peer = c.b if c.a == self.config.id else c.a
        session = self.sessions[peer] = Session(c)
        self._control(peer, summary_vector(self.config.id, self.holdings.have, c.start, self.sim_now(),
                                           self.loaded.scenario.engine.max_message_bytes))
        if self.clock.needs_reading(peer):
            self.outbox.send(self.endpoints[peer], self.clock.ping(self.wall.now()), timeout_ms=0)
        early = self.early_have.pop(peer, None)
        if early is not None and early[0] == c.start and time.monotonic() - early[1] <= EARLY_HAVE_S:
            session.peer_have = early[2]
            self._pump(peer)

    def _end(self, c: Contact, at: float) -> None:
        peer = c.b if c.a == self.config.id else c.a
        session = self.sessions.get(peer)
        if session is None or session.contact is not c:
            return
        if peer in self.closing:   # a contact ended before the previous one's verdict (back to back)
            self._abort(peer)
        del self.sessions[peer]
        if session.offer is not None:   # its acknowledgement may still be on its way (sent before the end)
            self.closing[peer] = (session, at, time.monotonic() + ACK_GRACE_S)

    def _abort_unacknowledged(self, force: bool = False) -> None:
        """Transfers of ended contacts whose acknowledgement did not come in time (``force``: all
        of them, now)."""
        if not self.closing:
            return
        if not force:
            self.poll(0)   # acknowledgements already here count, however long this peer was busy
        now = time.monotonic()
        for peer, (_, _, deadline) in list(self.closing.items()):
            if force or now >= deadline:
                self._abort(peer)

    def _abort(self, peer: int) -> None:
        """The transfer to ``peer`` was cut: its bytes on air are wasted, and what is still queued
        for that peer is dropped with its socket."""
        session, at, _ = self.closing.pop(peer)
        assert session.offer is not None
        c = session.contact
        on_air = min(session.offer.frame.size, int(c.bandwidth_bps * max(at - session.started, 0.0) / 8.0))
        self.recorder.transfer_aborted(self.config.id, peer, on_air, "contact ended")
        self.outbox.disconnect(self.endpoints[peer])

    def _pump(self, peer: int) -> None:
        """Send ``peer`` the next offer, if its summary vector is in and nothing is in flight."""
        session = self.sessions.get(peer)
        if session is None or session.peer_have is None or session.offer is not None:
            return
        sc, me = self.loaded.scenario, self.config.id
        offer = next_offer(self.holdings, me, peer, session.peer_have, self.sim_now(),
                           ttl=sc.asynchronous.max_age_s, policy=sc.asynchronous.send_policy,
                           carried_offer=lambda c: encode_carried(c, self.algo.kind(), me,
                                                                  sc.engine.max_message_bytes, sc.engine.precision))
        if offer is None:
            return
        session.offer, session.started = offer, self.sim_now()
        if not session.sent_any:
            session.sent_any = True
            self.timing["first_transfer_after_s"].append(session.started - session.contact.start)
        self.recorder.transfer_started(me)
        if self.outbox.send(self.endpoints[peer], offer.frame.data, timeout_ms=0):
            self._radio_busy()
        else:
            self.send_failed += 1   # stays in flight: aborted when the contact ends

    def _pump_all(self) -> None:
        for peer in sorted(self.sessions):
            self._pump(peer)

    def _on_control(self, control: Control) -> None:
        peer, session = control.sender, self.sessions.get(control.sender)
        if control.kind == CLOCK_KIND:   # a peer's clock ping, or its answer to this one's
            for data in self.clock.take(control, self.wall.now()):
                self.outbox.send(self.endpoints[peer], data, timeout_ms=0)
            return
        if control.kind == HAVE_KIND:
            have, contact = _summary_vector(control.meta.get("have")), control.meta.get("contact")
            if have is None or not isinstance(contact, (int, float)):
                self.intake.refuse(peer, self._interval(self.sim_now()), "control", "a summary vector must be a "
                                   "list of [origin, part, round, sent_at] and name its contact's start")
            elif session is None:
                self.early_have[peer] = (float(contact), time.monotonic(), have)
            elif session.peer_have is None and session.contact.start == contact:
                session.peer_have = have
                self._pump(peer)
            else:
                self.contact_stats["stale_summaries"] += 1   # an earlier contact's, resent by TCP
            return
        closing = self.closing.get(peer)
        if session is not None and session.offer is not None and _acknowledges(control.meta, session.offer):
            self._completed(session)
            self._pump(peer)
        elif closing is not None and closing[0].offer is not None and _acknowledges(control.meta, closing[0].offer):
            del self.closing[peer]   # taken in before the contact ended; its acknowledgement came after
            self._completed(closing[0])
        else:
            self.contact_stats["stray_acks"] += 1   # a transfer already counted aborted

    def _completed(self, session: Session) -> None:
        """The peer acknowledged the transfer in flight: it is complete (as the simulator counts
        one whose last byte arrived)."""
        offer, me, c = session.offer, self.config.id, session.contact
        assert offer is not None and session.peer_have is not None
        modelled = 8.0 * offer.frame.size / c.bandwidth_bps + c.latency_s
        self.timing["transfer_excess_s"].append(self.sim_now() - session.started - modelled)
        self.recorder.sent(me, offer.frame.size, self._interval(self.sim_now()))
        self.recorder.transfer_completed(me)
        mark_received(session.peer_have, offer)
        session.offer = None

    def handle(self, frame: zmq.Frame) -> bool:
        """One incoming frame: a control message, or a transfer taken in while its contact lasts."""
        now = self.sim_now()
        interval = self._interval(now)
        usable, who = self.authenticated(frame, interval)
        if not usable:
            return False
        data = frame.bytes
        wire = Frame(data)
        msg = wire.message(self.loaded.scenario.engine.max_message_bytes)
        if msg is not None and msg.kind in self.intake.rules.control_kinds:
            item = self.intake.take(data, link=who, now=now, round=interval, decoded=msg, memo=wire.memo)
            if isinstance(item, Control):
                self._on_control(item)
            return item is not None
        sender = who if who is not None else (msg.sender if msg is not None else None)
        if sender is None or sender not in self.sessions:
            self.contact_stats["late_frames"] += 1   # its contact was cut: its sender counted it aborted
            return False
        origin = origin_of(msg) if msg is not None else None
        if msg is not None and origin is not None:   # received, even if refused below: not offered again
            note_version(self.holdings.have, (origin, str(msg.meta.get("part", "whole"))), (msg.round, msg.sent_at))
        self._control(sender, acknowledgement(self.config.id, len(data), msg, now,
                                              self.loaded.scenario.engine.max_message_bytes))
        self._radio_busy()
        item = self.intake.take(data, link=who, now=now, round=interval, decoded=msg, memo=wire.memo)
        if isinstance(item, Received) and keep_to_carry(self.holdings, item, self.forwarding):
            self._pump_all()
        return isinstance(item, Received)

    # -- the loop --------------------------------------------------------------------------------
    def _step(self) -> None:
        me = self.config.id
        outgoing = self.loop.act(self.loop.actions)
        self.holdings.own = [Offer(me if o.origin is None else o.origin, o.part, o.round, o.sent_at, Frame(o.data),
                                   o.to) for o in outgoing]
        self._pump_all()

    def _evaluate(self, index: int) -> None:
        self.loop.evaluate(index)
        self.next_round = index + 1
        write_json(self.out / "progress.json", {"rounds_done": self.next_round, "time": self.wall.now()})

    def _receive_until(self, t: float) -> None:
        """Take messages in until simulated time ``t``."""
        left = self.start_time + t / self.speedup - self.wall.now()
        if left > 0:
            self.poll(min(left, POLL_SLICE_S))

    def run(self) -> dict[str, Any]:
        """Run the whole plan on the wall clock, then write results. Events due at one instant run
        in this order: contact ends, steps, contact opens, evaluations."""
        me, a = self.config.id, self.loaded.scenario.asynchronous
        due: list[tuple[float, int, int, Any]] = []
        for c in self.plan.contacts:
            if me in (c.a, c.b) and c.start < self.duration:
                due.append((min(c.end, self.duration), 0, len(due), ("end", c)))
                due.append((c.start, 2, len(due), ("open", c)))
        for k in range(self.evaluations):
            due.append((min((k + 1) * self.eval_every, self.duration), 3, len(due), ("evaluate", k)))
        due.append((self.first_step, 1, len(due), ("step", None)))
        heapq.heapify(due)
        order = len(due)
        while due:
            t, rank, _, (kind, what) = due[0]
            self._abort_unacknowledged()
            if self.sim_now() < t:
                self._receive_until(t)
                continue
            heapq.heappop(due)
            began = self.sim_now()
            if kind == "end":
                self._end(what, t)
            elif kind == "open":
                self._open(what)
            elif kind == "evaluate":
                self._evaluate(what)
            elif t < self.duration:
                self._step()
                jitter = float(self.rng.uniform(-a.train_jitter_s, a.train_jitter_s))
                order += 1
                heapq.heappush(due, (t + a.train_period_s + jitter, 1, order, ("step", None)))
            if kind in ("step", "evaluate"):
                self.timing["busy_s"].append(self.sim_now() - began)
        deadline = time.monotonic() + ACK_GRACE_S
        while self.closing and time.monotonic() < deadline:   # the last contacts' acknowledgements
            self.poll(min(deadline - time.monotonic(), POLL_SLICE_S))
        self._abort_unacknowledged(force=True)
        self.recorder.drop_log.tick()
        return self.finish()

    def report(self) -> dict[str, Any]:
        return {**super().report(), "contact_protocol": dict(self.contact_stats), "contact_timing": self.timing,
                "trainings": self.loop.actions, "fusions": self.loop.fusions}


def _acknowledges(meta: dict[str, Any], offer: Offer) -> bool:
    """Whether an acknowledgement names this offer (by its size, and its part and version when the
    receiver could read them)."""
    if meta.get("bytes") != offer.frame.size:
        return False
    named = [meta.get(k) for k in ("origin", "part", "round", "sent_at")]
    return named == [None] * 4 or named == [offer.origin, offer.part, offer.round, offer.sent_at]


def _summary_vector(raw: Any) -> dict[tuple[int, str], Version] | None:
    """A peer's summary vector from its message's meta, None when it is malformed."""
    if not isinstance(raw, list):
        return None
    have: dict[tuple[int, str], Version] = {}
    for entry in raw:
        if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], int)
                and isinstance(entry[1], str) and isinstance(entry[2], int) and isinstance(entry[3], (int, float))):
            return None
        have[entry[0], entry[1]] = (entry[2], float(entry[3]))
    return have
