"""Each device's own clock in a contact run: a step every ``train_period_s`` (± jitter) from its
first. Without a batch window the step happens at once; with one (``batch_window_s``) it takes
its inputs when it falls due and finishes at the end of its window, with every other step started
in the window, batched (finished in two halves: work the methods offload goes meanwhile to a
helper process). With the energy model a step takes its work's time: its share is offered when
it is done, and the next step starts no earlier."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import numpy as np
import simpy

from p2pfed.device import DeviceLoop, Outgoing, PendingFusion, finish_together, start_together
from p2pfed.engine.contact_availability import Availability
from p2pfed.engine.contact_schedule import AsyncSchedule
from p2pfed.engine.contact_checkpoint import Pending, outgoing_from_state, outgoing_state
from p2pfed.engine.contact_store import Store
from p2pfed.engine.contact_world import ContactWorld


class StepClock:
    """Every device's steps; ``first_training_s``: when each device first steps."""

    def __init__(self, world: ContactWorld, loops: list[DeviceLoop], schedule: AsyncSchedule, rng: np.random.Generator,
                 availability: Availability, store: Store, first_training_s: list[float], batched: bool) -> None:
        self.world = world
        self.loops = loops
        self.schedule = schedule
        self.rng = rng
        self.availability = availability
        self.energy = availability.energy
        self.store = store
        self.first_training_s = first_training_s
        self.batched = batched
        self.batches: dict[float, list[tuple[int, PendingFusion | None]]] = {}   # window end -> steps started
        self.steps_taken = 0                        # device steps, and the batches they took
        self.batches_taken = 0
        self.step_started: dict[int, float] = {}    # with energy and a batch window: when each step began
        self.wakes: list[simpy.Event | None] = [None] * len(loops)
        self.offers_later: dict[simpy.Event, tuple[int, list[Outgoing]]] = {}

    def start(self) -> None:
        for i in range(len(self.loops)):
            self.world.env.process(self._device(i))

    def _device(self, i: int, wake: simpy.Event | None = None) -> Generator[simpy.Event, Any, None]:
        """Device i's clock (``wake``: a restored device's next step)."""
        sch, env = self.schedule, self.world.env
        wake = wake if wake is not None else env.timeout(float(self.first_training_s[i]))
        self.wakes[i] = wake
        yield wake
        while env.now < sch.duration_s:
            busy = 0.0
            if self.availability.online[i]:
                if self.energy is not None:
                    busy = self._measured_step(i)
                elif sch.batch_window_s:
                    self._start_step(i)
                else:
                    self._act([i], [self.loops[i].act(self.loops[i].actions)])
            jitter = float(self.rng.uniform(-sch.train_jitter_s, sch.train_jitter_s))
            wake = env.timeout(max(sch.train_period_s + jitter, busy) if busy else sch.train_period_s + jitter)
            self.wakes[i] = wake
            yield wake
        self.wakes[i] = None

    def _measured_step(self, i: int) -> float:
        """A step of a device whose compute and energy are modelled: none if its battery is
        empty; else, without a batch window, done now and offered once its work's time has
        passed (returned: the device is busy that long); with one, started now (charged when its
        window ends)."""
        assert self.energy is not None
        if not self.availability.has_energy(i):
            return 0.0
        if self.schedule.batch_window_s:
            self.step_started[i] = self.world.now()
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
        end = self._window_end(self.world.now())
        batch = self.batches.get(end)
        if batch is None:
            batch = self.batches[end] = []
            self.world.env.process(self._finish_batch(end))
        batch.append((i, pending))

    def _finish_batch(self, end: float) -> Generator[simpy.Event, Any, None]:
        """At the window's end, finish its steps: in two halves, in the order they started, so
        that the work the later half offloaded (``ctx.offload``), sent to the helper process last,
        gets the first half's fusion and training time to come back instead of being computed
        here. Every run splits alike, with the helper or without, so the results do not depend on
        the helper."""
        yield self.world.env.timeout(end - self.world.env.now)
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
        now = self.world.now()
        self._act(stepped, shares, [max(0.0, self.step_started.pop(i, now) + self.energy.charge_step(
            i, self.loops[i].work_flops, self.loops[i].fusion_flops) - now) for i in stepped])

    def _act(self, devices: list[int], shares: list[list[Outgoing]], delays: list[float] | None = None) -> None:
        """The devices acted (together, when several): offer what each one shared, or (with
        ``delays``, the energy model's) offer it once its step is done."""
        self.steps_taken += len(devices)
        self.batches_taken += 1
        for k, (i, outgoing) in enumerate(zip(devices, shares, strict=True)):
            if delays is not None and delays[k] > 0:
                self.world.env.process(self._offer_later(i, outgoing, delays[k]))
            else:
                self._offer(i, outgoing)

    def _offer(self, i: int, outgoing: list[Outgoing]) -> None:
        if self.energy is not None and not self.availability.has_energy(i):
            return   # the step used up the battery: its share never leaves
        self.store.publish(i, outgoing)
        self.world.pulse(self.world.news, i)

    def _offer_later(self, i: int, outgoing: list[Outgoing], delay: float,
                     wake: simpy.Event | None = None) -> Generator[simpy.Event, Any, None]:
        wake = wake if wake is not None else self.world.env.timeout(delay)
        self.offers_later[wake] = (i, outgoing)
        yield wake
        del self.offers_later[wake]
        self._offer(i, outgoing)

    # -- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The step counts, each device's next step, and the shares waiting for their step's work."""
        if self.batches:
            raise RuntimeError("a batch window is open at the checkpoint: evaluation.every_s must be a "
                               "multiple of asynchronous.batch_window_s")
        pending = self.world.timeouts.pending
        return {"counts": [self.steps_taken, self.batches_taken],
                "device_wakes": [None if ev is None else pending(ev) for ev in self.wakes],
                "offers_later": [{"device": i, "wake": pending(ev), "outgoing": [outgoing_state(o) for o in out]}
                                 for ev, (i, out) in self.offers_later.items()]}

    @staticmethod
    def pending(state: dict[str, Any]) -> Iterator[Pending]:
        yield from (p for p in state["device_wakes"] if p is not None)
        yield from (later["wake"] for later in state["offers_later"])

    def load_counts(self, state: dict[str, Any]) -> None:
        self.steps_taken, self.batches_taken = (int(x) for x in state["counts"])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Every device's clock again, waiting on its next step."""
        self.load_counts(state)
        for i, p in enumerate(state["device_wakes"]):
            if p is not None:
                self.world.env.process(self._device(i, self.world.timeouts.event(p)))

    def load_offers_later(self, state: dict[str, Any]) -> None:
        """The shares waiting for their step's work again."""
        for later in state["offers_later"]:
            outgoing = [outgoing_from_state(o) for o in later["outgoing"]]
            self.world.env.process(self._offer_later(int(later["device"]), outgoing, 0.0,
                                                     self.world.timeouts.event(later["wake"])))
