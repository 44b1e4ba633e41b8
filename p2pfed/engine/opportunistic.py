"""The opportunistic runtime: no rounds, devices learn on their own clocks and talk only in contact.

Each device is a SimPy process that acts through its ``DeviceLoop`` every ``train_period_s``
(± jitter): fuse what arrived since its last fusion, train, share. With a batch window
(``batch_window_s``) a step takes its inputs when it falls due and finishes at the end of its
window, with every other step started in the window, batched (at 1,000 devices, ~100 steps a
window, finished in two halves; work the methods offload goes meanwhile to a helper process). Its
share is split into parts so a short contact can still deliver the small ones; everything that arrives
goes through the device's ``Intake``. When a contact starts, each direction runs one
transfer at a time, in the send-policy order, at the contact's bandwidth; a transfer that the
contact end (or either device going offline) interrupts is aborted and its bytes on air are
wasted. Nothing partial ever reaches an algorithm. Before each transfer the devices compare
summary vectors (what each holds, as in epidemic routing; Vahdat & Becker 2000), so nothing a
peer already has is sent again. By default (``contacts.protocol: ideal``) a device reads its peer's
summary vector directly and a transfer is complete when its last byte arrives (latency + size /
bandwidth). With ``acknowledged`` the simulator runs real peers' protocol instead: each side sends
its summary vector when the contact opens and waits for the other's, a transfer is complete
when the receiver's acknowledgement is back, and every message takes its place in one queue per
direction with its framing bytes (``engine.contact_lines``, ``device.contact_protocol``): an
acknowledgement lost to the contact's end leaves the transfer aborted on the sender's side though
the receiver has it, as between real peers.

With forwarding on, a device also keeps the parts named in ``forwarding.parts`` that it received
(the prototypes, by default) and passes them on to devices it meets later, up to ``hop_limit``
links from their owner and ``buffer_items`` carried items (the oldest are evicted first).

A run can stop at an evaluation and continue later from ``state_dict``, bit-identical: every
process records what it waits on (``engine.contact_checkpoint``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import simpy

from p2pfed.algorithms import Algorithm, Received
from p2pfed.device import (DeviceLoop, IntakeRules, Outgoing, PendingFusion, evaluate_together,
                           finish_together, start_together)
from p2pfed.device.contact_protocol import acknowledgement, summary_vector
from p2pfed.device.exchange import (SEND_POLICIES, Forwarding, Frame, Holdings, Offer, PartKey, Version,
                                    encode_carried, keep_to_carry, mark_received, next_offer)
from p2pfed.engine.contact_checkpoint import Wait, Waits, contact_run_state, restore_contact_run
from p2pfed.engine.contact_lines import ContactLines, Direction
from p2pfed.engine.delivery import Delivery
from p2pfed.network.contacts import Contact, ContactPlan
from p2pfed.device.energy import EnergyMeter
from p2pfed.results.recorder import Recorder

@dataclass(frozen=True)
class AsyncSchedule:
    duration_s: float
    train_period_s: float
    eval_every_s: float
    train_jitter_s: float = 0.0
    send_policy: str = "smallest-first"
    max_age_s: float | None = None     # TTL of cached and carried artifacts
    loss_rate: float = 0.0             # chance that a fully sent message is lost
    batch_window_s: float = 0.0        # > 0: steps started in one window finish together at its end
    protocol: str = "ideal"            # "acknowledged": real peers' summary vectors and acknowledgements


PROTOCOLS = ("ideal", "acknowledged")


@dataclass
class DeviceState(Holdings):
    online: bool = True
    offline_s: float = 0.0


class OpportunisticSimulation:
    """Asynchronous learning over a contact plan, with optional forwarding, loss and churn."""

    def __init__(self, algorithms: list[Algorithm], plan: ContactPlan, schedule: AsyncSchedule,
                 recorder: Recorder, rng: np.random.Generator, *, max_message_bytes: int,
                 forwarding: Forwarding = Forwarding(), offline: Sequence[tuple[int, float, float]] = (),
                 first_training_s: list[float] | None = None,
                 on_time: Callable[[float], None] | None = None, batched: bool = True,
                 precision: str = "float32", energy: EnergyMeter | None = None) -> None:
        """``offline``: (device, from, until) spans; ``first_training_s``: when each device first
        trains (default: a uniform random phase within one period, so clocks are not aligned);
        ``batched``: steps finishing together (``schedule.batch_window_s``) batch their arithmetic
        (``finish_together``; ``engine.batched_training``); ``precision``: the wire precision of
        shared float tensors, carried copies included (``engine.precision``); ``energy``: the
        devices' compute speed, energy and batteries (``devices``; None: not modelled, and none
        of it runs). A step then takes its work's time (its share is offered when it is done,
        and the next step starts no earlier); a device whose battery is empty is off, like an
        offline one, until a recharge."""
        if schedule.send_policy not in SEND_POLICIES:
            raise ValueError(f"unknown send policy {schedule.send_policy!r}; choose one of {SEND_POLICIES}")
        if schedule.protocol not in PROTOCOLS:
            raise ValueError(f"unknown contact protocol {schedule.protocol!r}; choose one of {PROTOCOLS}")
        self.env = simpy.Environment()
        self.algorithms = algorithms
        self.plan = plan
        self.schedule = schedule
        self.recorder = recorder
        self.rng = rng
        self.max_message_bytes = max_message_bytes
        self.precision = precision
        self.forwarding = forwarding
        self.offline = sorted(offline, key=lambda x: (x[1], x[0]))
        self.on_time = on_time
        self.batched = batched
        self.first_training_s = (list(first_training_s) if first_training_s is not None else
                                 list(rng.uniform(0, schedule.train_period_s, len(algorithms))))
        n = len(algorithms)
        self.loops = [DeviceLoop(i, algo, recorder, clock=lambda: float(self.env.now),
                                 max_message_bytes=max_message_bytes,
                                 neighbours=cast("Callable[[], list[int]]",
                                                 lambda i=i: self.plan.neighbours(i, float(self.env.now))),
                                 max_age_s=schedule.max_age_s, split_parts=schedule.send_policy != "whole",
                                 precision=precision)
                      for i, algo in enumerate(algorithms)]
        self.delivery = Delivery(algorithms, recorder,
                                 IntakeRules(max_message_bytes, max_age_s=schedule.max_age_s,
                                             hop_limit=forwarding.hop_limit, num_devices=n))
        self.state = [DeviceState() for _ in range(n)]
        # Pulses wake waiting transfers: a device has something new to offer / went on or offline.
        self.news = [self.env.event() for _ in range(n)]
        self.switched = [self.env.event() for _ in range(n)]
        self.went_offline = [self.env.event() for _ in range(n)]
        self.batches: dict[float, list[tuple[int, PendingFusion | None]]] = {}   # window end -> steps started
        self.steps_taken = 0                        # device steps, and the batches they took
        self.batches_taken = 0
        self.energy = energy
        self.step_started: dict[int, float] = {}    # with energy and a batch window: when each step began
        # What every process waits on, so that a checkpoint can describe the run mid-way and a
        # restored run waits on the same things (``engine.contact_checkpoint``).
        self.waits = Waits(n)
        self.evaluator: simpy.Process | None = None
        # ``protocol: acknowledged``: the open contacts' links, each session's copy of its peer's
        # summary vector (kept current by acknowledgements), and the protocol's own messages
        self.acknowledged = schedule.protocol == "acknowledged"
        self.lines = ContactLines()
        self.peer_have: dict[Direction, dict[PartKey, Version]] = {}
        self.control = {"control_messages": 0, "control_bytes": 0}
        if energy is not None:
            energy.clock = lambda: float(self.env.now)
            for i, loop in enumerate(self.loops):
                loop.count_work = True
                if energy.has_batteries:
                    loop.algorithm.ctx.battery = cast("Callable[[], float | None]", lambda i=i: energy.left_j(i))

    def _or_churn(self, event: simpy.Event, *pulses: simpy.Event) -> simpy.Event:
        """``event | pulse | ...`` with the churn pulses left out of a run without churn: they
        never fire there, and each ``|`` costs a condition event on every wait."""
        off = self.offline or (self.energy is not None and self.energy.has_batteries)
        for pulse in pulses if off else ():
            event = event | pulse
        return event

    def _pulse(self, events: list[simpy.Event], i: int) -> None:
        ev, events[i] = events[i], self.env.event()
        ev.succeed()

    # -- learning on each device's own clock -------------------------------------------------
    def _device(self, i: int, wake: simpy.Event | None = None) -> Generator[simpy.Event, Any, None]:
        """Device i's clock: a step every period (± jitter) from its first. Without a batch
        window the step happens at once; with one, it starts at once (what the device holds now
        is what it fuses) and finishes at the end of its window (``_window_end``), together
        with every step started in that window (``_finish_batch``). ``wake``: a restored
        device's next step."""
        sch = self.schedule
        wake = wake if wake is not None else self.env.timeout(float(self.first_training_s[i]))
        self.waits.device[i] = wake
        yield wake
        while self.env.now < sch.duration_s:
            busy = 0.0
            if self.state[i].online:
                if self.energy is not None:
                    busy = self._measured_step(i)
                elif sch.batch_window_s:
                    self._start_step(i)
                else:
                    self._act([i], [self.loops[i].act(self.loops[i].actions)])
            jitter = float(self.rng.uniform(-sch.train_jitter_s, sch.train_jitter_s))
            wake = self.env.timeout(max(sch.train_period_s + jitter, busy) if busy else sch.train_period_s + jitter)
            self.waits.device[i] = wake
            yield wake
        self.waits.device[i] = None

    def _measured_step(self, i: int) -> float:
        """A step of a device whose compute and energy are modelled: none if its battery is
        empty; else, without a batch window, done now and offered once its work's time has
        passed (returned: the device is busy that long); with one, started now (charged when its
        window ends)."""
        assert self.energy is not None
        if not self._has_energy(i):
            return 0.0
        if self.schedule.batch_window_s:
            self.step_started[i] = float(self.env.now)
            self._start_step(i)
            return 0.0
        loop = self.loops[i]
        shares = loop.act(loop.actions)
        took = self.energy.charge_step(i, loop.work_flops, loop.fusion_flops)
        self._act([i], [shares], [took])
        return took

    def _window_end(self, now: float) -> float:
        """The end of the batch window (k w, (k+1) w] that ``now`` falls in (a step that starts
        on a window's end finishes at once)."""
        w = self.schedule.batch_window_s
        return float(np.ceil(now / w - 1e-9)) * w

    def _start_step(self, i: int) -> None:
        """Start device i's step now (``start_together``: its fusion's inputs are taken now and
        its K sweeps may go to a helper process) and queue it for the end of its window; the
        first step of a window starts the process that finishes them all."""
        loop = self.loops[i]
        (pending,) = start_together([loop], [loop.actions])
        end = self._window_end(float(self.env.now))
        batch = self.batches.get(end)
        if batch is None:
            batch = self.batches[end] = []
            self.env.process(self._finish_batch(end))
        batch.append((i, pending))

    def _finish_batch(self, end: float) -> Generator[simpy.Event, Any, None]:
        """At the window's end, finish its steps: in two halves, in the order they started, so
        that the work the later half offloaded (``ctx.offload``), sent to the helper process last,
        gets the first half's fusion and training time to come back instead of being computed
        here (``scenarios/synthetic-rwp-1000.yaml``, 8 hours: 12 min 39 s against 14 min 50 s in
        one go, same results). Every run splits alike, with the helper or without, so the results
        do not depend on the helper."""
        yield self.env.timeout(end - self.env.now)
        steps = self.batches.pop(end)
        half = (len(steps) + 1) // 2
        shares: list[list[Outgoing]] = []
        for part in (steps[:half], steps[half:]):
            if part:
                devices, pending = zip(*part)
                loops = [self.loops[i] for i in devices]
                shares += finish_together(loops, [loop.actions for loop in loops], pending,
                                          train=[True] * len(loops), evaluate=False, batched=self.batched)
        stepped = [i for i, _ in steps]
        if self.energy is None:
            self._act(stepped, shares)
            return
        # each step is done its work's time after it started, at the window's end at the earliest
        now = float(self.env.now)
        self._act(stepped, shares, [max(0.0, self.step_started.pop(i, now) + self.energy.charge_step(
            i, self.loops[i].work_flops, self.loops[i].fusion_flops) - now) for i in stepped])

    def _act(self, devices: list[int], shares: list[list[Outgoing]], delays: list[float] | None = None) -> None:
        """The devices acted (together, when several): offer what each one shared, or (with
        ``delays``, the energy model's) offer it once its step is done."""
        self.steps_taken += len(devices)
        self.batches_taken += 1
        for k, (i, outgoing) in enumerate(zip(devices, shares, strict=True)):
            if delays is not None and delays[k] > 0:
                self.env.process(self._offer_later(i, outgoing, delays[k]))
            else:
                self._offer(i, outgoing)

    def _offer(self, i: int, outgoing: list[Outgoing]) -> None:
        if self.energy is not None and not self._has_energy(i):
            return   # the step used up the battery: its share never leaves
        self.state[i].own = [Offer(i if out.origin is None else out.origin, out.part, out.round, out.sent_at,
                                   Frame(out.data), out.to) for out in outgoing]
        self._pulse(self.news, i)

    def _offer_later(self, i: int, outgoing: list[Outgoing], delay: float,
                     wake: simpy.Event | None = None) -> Generator[simpy.Event, Any, None]:
        wake = wake if wake is not None else self.env.timeout(delay)
        self.waits.offers_later[wake] = (i, outgoing)
        yield wake
        del self.waits.offers_later[wake]
        self._offer(i, outgoing)

    def _interval(self) -> int:
        """The evaluation interval (0-based) traffic is counted in: rounds.csv rows are cumulative
        through the interval that ends with their evaluation."""
        return min(int(self.env.now // self.schedule.eval_every_s), max(self.evaluations - 1, 0))

    @property
    def evaluations(self) -> int:
        """How many evaluations the run makes (the last one at its end)."""
        return int(np.ceil(self.schedule.duration_s / self.schedule.eval_every_s - 1e-9))

    def _evaluator(self, index: int = 0, t: float | None = None,
                   wake: simpy.Event | None = None) -> Generator[simpy.Event, Any, None]:
        """Evaluate every device every ``eval_every_s`` and at the end (``index``, ``t``: a
        restored run's next evaluation and its time)."""
        every, end = self.schedule.eval_every_s, self.schedule.duration_s
        t = every if t is None else t
        while True:
            t = min(t, end)
            self.waits.evaluation = (index, t, wake if wake is not None else self.env.timeout(t - self.env.now))
            yield self.waits.evaluation[2]
            wake = None
            evaluate_together(self.loops, index, batched=self.batched)
            if self.energy is not None:
                self.energy.snapshot(index)
            index += 1
            self.waits.evaluated = index
            if self.on_time is not None:
                self.on_time(float(self.env.now))
            stop = self.waits.stop
            if stop is not None and index == self.waits.stop_after and not stop.triggered:
                stop.succeed()
            if t >= end:
                return
            t += every

    def _wake_at(self, t: float, wake: simpy.Event | None) -> simpy.Event:
        """``wake`` (a restored run's pending timeout) or a new timeout at ``t`` (now if past)."""
        return wake if wake is not None else self.env.timeout(max(t - self.env.now, 0.0))

    # -- churn -------------------------------------------------------------------------------
    def _churn(self, i: int, spans: list[tuple[float, float]], first: int = 0, back: bool = False,
               wake: simpy.Event | None = None) -> Generator[simpy.Event, Any, None]:
        """Device i off and on again over its ``spans`` (a restored run: from span ``first``,
        waiting to go off, or with ``back`` to come back, on ``wake``)."""
        for k in range(first, len(spans)):
            off_from, off_until = spans[k]
            if not (back and k == first):
                self.waits.churn[i] = (k, False, self._wake_at(off_from, wake))
                wake = None
                yield self.waits.churn[i][2]
                self.state[i].online = False
                self._pulse(self.went_offline, i)
                self._pulse(self.switched, i)
            self.waits.churn[i] = (k, True, self._wake_at(off_until, wake))
            wake = None
            yield self.waits.churn[i][2]
            self.state[i].online = True
            self.state[i].offline_s += off_until - off_from
            self._pulse(self.switched, i)
        self.waits.churn.pop(i, None)

    # -- batteries ----------------------------------------------------------------------------
    def _up(self, i: int) -> bool:
        """Online (churn) and with energy left (batteries)."""
        return self.state[i].online and (self.energy is None or self.energy.powered[i])

    def _has_energy(self, i: int) -> bool:
        """Whether device i may act now; the first time its battery is found empty it stops, and
        its transfers in flight are aborted (as when it goes offline)."""
        assert self.energy is not None
        was_on = self.energy.powered[i]
        if self.energy.check(i, float(self.env.now)):
            return True
        if was_on:
            self._pulse(self.went_offline, i)
            self._pulse(self.switched, i)
        return False

    def _recharges(self, wake: simpy.Event | None = None) -> Generator[simpy.Event, Any, None]:
        """Every battery full again on the schedule; stopped devices run again."""
        assert self.energy is not None
        while self.energy.next_recharge is not None and self.energy.next_recharge < self.schedule.duration_s:
            self.waits.recharge = self._wake_at(self.energy.next_recharge, wake)
            wake = None
            yield self.waits.recharge
            for i in self.energy.recharge_due(float(self.env.now)):
                self._pulse(self.switched, i)
        self.waits.recharge = None

    # -- contacts and transfers --------------------------------------------------------------
    def _contacts(self, first: int = 0, wake: simpy.Event | None = None) -> Generator[simpy.Event, Any, None]:
        """Open each contact of the plan when it starts (a restored run: from contact ``first``)."""
        contacts, duration = self.plan.contacts, self.schedule.duration_s
        for index in range(first, len(contacts)):
            c = contacts[index]
            if c.start >= duration:
                break
            self.waits.contact = (index, wake if wake is not None else self.env.timeout(c.start - self.env.now))
            wake = None
            yield self.waits.contact[1]
            self._open(index, self.env.timeout(min(c.end, duration) - self.env.now))
        self.waits.contact = None

    def _open(self, index: int, end: simpy.Event) -> None:
        """Contact ``index`` is on until ``end``: a session each way."""
        c = self.plan.contacts[index]
        self._track_end(index, end)
        self.env.process(self._session(c.a, c.b, index, end, self._summary(c.a, c.b, index)))
        self.env.process(self._session(c.b, c.a, index, end, self._summary(c.b, c.a, index)))

    def _summary(self, src: int, dst: int, index: int) -> Wait | None:
        """With the acknowledged protocol, session ``src`` -> ``dst`` first waits for ``dst``'s
        summary vector, sent as the contact opens (None: the ideal protocol reads it directly)."""
        if not self.acknowledged:
            return None
        c, now, have = self.plan.contacts[index], float(self.env.now), self.state[dst].have
        self.peer_have[src, dst, index] = dict(have)
        wait = Wait("summary", started=now)
        self._wait_until(wait, self._send_control((dst, src, index),
                                                  summary_vector(dst, have, c.start, now, self.max_message_bytes)))
        return wait

    def _send_control(self, direction: Direction, data: bytes) -> float:
        """A protocol message on its way: when it arrives."""
        self.control["control_messages"] += 1
        self.control["control_bytes"] += len(data)
        return self.lines.send(direction, self.plan.contacts[direction[2]], float(self.env.now), len(data))

    def _track_end(self, index: int, end: simpy.Event) -> None:
        """Contact ``index`` is on until ``end`` (kept for a checkpoint while it lasts)."""
        self.waits.contact_ends[index] = end

        def ended(_: simpy.Event) -> None:
            self.waits.contact_ends.pop(index, None)
            self.lines.close(index)
        end.callbacks.append(ended)

    def _next_offer(self, src: int, dst: int, index: int) -> Offer | None:
        """What ``src`` sends ``dst`` next (``device.exchange.next_offer``: ``dst``'s summary
        vector read directly, or as it came at the contact's start and acknowledgements since)."""
        have = self.peer_have[src, dst, index] if self.acknowledged else self.state[dst].have
        return next_offer(self.state[src], src, dst, have, float(self.env.now),
                          ttl=self.schedule.max_age_s, policy=self.schedule.send_policy,
                          carried_offer=lambda c: encode_carried(c, self.algorithms[src].kind(), src,
                                                                 self.max_message_bytes, self.precision))

    def _session(self, src: int, dst: int, index: int, end: simpy.Event,
                 resume: Wait | None = None) -> Generator[simpy.Event, Any, None]:
        """One direction of contact ``index``: transfers one after the other until it ends
        (``resume``: a restored session's wait, taken up without deciding again)."""
        key = (src, dst, index)
        while not end.processed:
            wait = resume if resume is not None else self._decide(src, dst, index)
            resume = None
            if wait is None:
                continue
            if wait.seq < 0:
                wait.seq = next(self.waits.counter)
            self.waits.sessions[key] = wait
            if wait.kind in ("transfer", "ack"):
                yield from self._transfer(src, dst, wait, index, end)
            elif wait.kind == "summary":
                assert wait.done is not None
                yield wait.done | end
            elif wait.kind == "down":
                yield end | self.switched[src] | self.switched[dst]
            else:
                yield self._or_churn(end | self.news[src], self.switched[src], self.switched[dst])
        self.waits.sessions.pop(key, None)
        self.peer_have.pop(key, None)

    def _decide(self, src: int, dst: int, index: int) -> Wait | None:
        """What a session does next: wait for both ends to be up, send its next offer, wait for
        one (None: a battery just ran out; decide again)."""
        if not (self._up(src) and self._up(dst)):
            return Wait("down")
        if self.energy is not None and not (self._has_energy(src) and self._has_energy(dst)):
            return None
        offer = self._next_offer(src, dst, index)
        return Wait("idle") if offer is None else Wait("transfer", offer, float(self.env.now))

    def _transfer(self, src: int, dst: int, wait: Wait, index: int,
                  end: simpy.Event) -> Generator[simpy.Event, Any, None]:
        """One transfer until it is complete or cut (a restored one: from the stage it was in)."""
        contact, offer = self.plan.contacts[index], wait.offer
        assert offer is not None
        if wait.kind == "transfer":
            if wait.done is None:   # a new transfer (a restored one has its end already)
                self.recorder.transfer_started(src)
                now = float(self.env.now)
                self._wait_until(wait, self.lines.send((src, dst, index), contact, now, offer.frame.size)
                                 if self.acknowledged else
                                 now + (8.0 * offer.frame.size / contact.bandwidth_bps + contact.latency_s))
            if not (yield from self._arrives(src, dst, wait, contact, end)):
                return
            if not self.acknowledged:
                self._completed(src, dst, wait, self.state[dst].have)
                self._deliver(src, dst, offer)
                return
            # taken in by the receiver, which acknowledges it on its own link (behind what it sends)
            mark_received(self.state[dst].have, offer)
            self._deliver(src, dst, offer)
            if end.processed:   # it arrived as the contact ended: no acknowledgement can cross
                self._cut(src, dst, wait, contact, end)
                return
            now = float(self.env.now)
            msg = offer.frame.message(self.max_message_bytes)
            wait.kind = "ack"
            self._wait_until(wait, self._send_control(
                (dst, src, index), acknowledgement(dst, offer.frame.size, msg, now, self.max_message_bytes)))
        if (yield from self._arrives(src, dst, wait, contact, end)):
            self._completed(src, dst, wait, self.peer_have[src, dst, index])

    def _wait_until(self, wait: Wait, t: float) -> None:
        """``wait`` ends at ``t`` (``until`` as SimPy computes the timeout's time, to the bit)."""
        now = float(self.env.now)
        delay = t - now
        wait.until, wait.done = now + delay, self.env.timeout(delay)

    def _arrives(self, src: int, dst: int, wait: Wait, contact: Contact,
                 end: simpy.Event) -> Generator[simpy.Event, Any, bool]:
        """Wait for the transfer's current stage to arrive; False (counted aborted, its bytes on
        air wasted) when the contact's end or a device going offline cuts it first."""
        assert wait.done is not None and wait.offer is not None
        yield self._or_churn(wait.done | end, self.went_offline[src], self.went_offline[dst])
        if float(self.env.now) >= wait.until:
            return True
        self._cut(src, dst, wait, contact, end)
        return False

    def _cut(self, src: int, dst: int, wait: Wait, contact: Contact, end: simpy.Event) -> None:
        """The transfer was cut now: aborted, its bytes on air wasted."""
        assert wait.offer is not None
        now = float(self.env.now)
        if self.energy is not None:   # both radios busy while the transfer lasted, cut or not
            self.energy.radio_busy(src, wait.started, now)
            self.energy.radio_busy(dst, wait.started, now)
        on_air = min(wait.offer.frame.size, int(contact.bandwidth_bps * (now - wait.started) / 8.0))
        self.recorder.transfer_aborted(src, dst, on_air, "contact ended" if end.processed else "device offline")

    def _completed(self, src: int, dst: int, wait: Wait, dst_have: dict[PartKey, Version]) -> None:
        """The transfer is complete: counted as sent, and the receiver's summary vector notes it."""
        assert wait.offer is not None
        if self.energy is not None:
            self.energy.radio_busy(src, wait.started, float(self.env.now))
            self.energy.radio_busy(dst, wait.started, float(self.env.now))
        self.recorder.sent(src, wait.offer.frame.size, self._interval())
        self.recorder.transfer_completed(src)
        mark_received(dst_have, wait.offer)

    def _deliver(self, src: int, dst: int, offer: Offer) -> None:
        """``offer`` reached ``dst``'s intake (unless the link's loss model drops it)."""
        interval = self._interval()
        if self.schedule.loss_rate and self.rng.random() < self.schedule.loss_rate:
            self.recorder.lost(src, dst, offer.frame.size, interval)
            return
        item = self.delivery.deliver(src, dst, offer.frame, float(self.env.now), interval)
        if item is not None:
            self._carry(dst, item)

    def _carry(self, i: int, item: Received) -> None:
        """Keep a received part to pass on (``device.exchange.keep_to_carry``)."""
        if keep_to_carry(self.state[i], item, self.forwarding):
            self._pulse(self.news, i)

    # -- driver ----------------------------------------------------------------------------
    def run(self) -> float:
        """Run until ``duration_s``; returns the simulated time at the end."""
        try:
            self.start()
            self.advance(self.evaluations)
        finally:
            self.close()
        return float(self.env.now)

    def churn_spans(self) -> dict[int, list[tuple[float, float]]]:
        """Each churning device's offline spans, in time order."""
        spans: dict[int, list[tuple[float, float]]] = {}
        for i, off_from, off_until in self.offline:
            spans.setdefault(i, []).append((off_from, off_until))
        return spans

    def start(self) -> None:
        """Start every process of a new run (``load_state_dict`` instead continues a saved one)."""
        for i in range(len(self.algorithms)):
            self.env.process(self._device(i))
        for i, s in self.churn_spans().items():
            self.env.process(self._churn(i, s))
        self.env.process(self._contacts())
        if self.energy is not None and self.energy.next_recharge is not None:
            self.env.process(self._recharges())
        self.evaluator = self.env.process(self._evaluator())

    def advance(self, evaluations: int) -> None:
        """Run until ``evaluations`` evaluations are done: to the end, or (fewer) to a moment a
        checkpoint can describe, every event due at that evaluation's time processed."""
        assert self.evaluator is not None, "start() or load_state_dict() first"
        if evaluations >= self.evaluations:
            self.env.run(until=self.evaluator)
            return
        self.waits.stop_after, self.waits.stop = evaluations, self.env.event()
        self.env.run(until=self.waits.stop)
        now = self.env.now
        while self.env.peek() <= now:
            self.env.step()

    def close(self) -> None:
        self.delivery.close()

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue after ``advance`` stopped short of the end (checkpoint
        data; ``engine.contact_checkpoint``)."""
        return contact_run_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue a run saved by ``state_dict`` (on a simulation built from the same scenario,
        instead of ``start``)."""
        restore_contact_run(self, state)

    def stats(self) -> dict[str, float | None]:
        """Per-device means worth reporting next to the communication counters."""
        n = max(len(self.state), 1)
        return {
            "trainings_per_device": sum(loop.actions for loop in self.loops) / n,
            "fusions_per_device": sum(loop.fusions for loop in self.loops) / n,
            "mean_fused_age_s": self.recorder.mean_fused_age_s,
            "devices_per_batch": self.steps_taken / self.batches_taken if self.batches_taken else None,
            "offline_fraction": sum(s.offline_s for s in self.state) / n / max(self.schedule.duration_s, 1e-12),
        }
