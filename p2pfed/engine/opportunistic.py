"""The opportunistic runtime: no rounds, devices learn on their own clocks and talk only in contact.

Each device is a SimPy process that acts through its ``DeviceLoop`` every ``train_period_s``
(± jitter): fuse what arrived since its last fusion, train, share. The run is made of parts,
each in its own module and each saving and restoring its own state:

- ``contact_steps``: each device's clock and the batch windows its steps finish in;
- ``contact_sessions``: contacts and their sessions, one transfer at a time each way, with the
  contact protocol (``contact_protocols``: ``ideal`` or ``acknowledged``) as a strategy;
- ``contact_store``: store-carry-forward, what each device offers and carries for others;
- ``contact_availability``: churn, batteries and recharges;
- ``contact_evaluation``: every device evaluated every ``eval_every_s`` and at the end.

A run can stop at an evaluation and continue later from ``state_dict``, bit-identical
(``contact_world``); a checkpoint taken at the run's end holds what its results need.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import simpy

from p2pfed.algorithms import Algorithm
from p2pfed.device import DeviceLoop, IntakeRules
from p2pfed.device.exchange import SEND_POLICIES, Forwarding
from p2pfed.engine.contact_availability import Availability
from p2pfed.engine.contact_evaluation import Evaluations
from p2pfed.engine.contact_protocols import PROTOCOL_CLASSES
from p2pfed.engine.contact_schedule import PROTOCOLS, AsyncSchedule
from p2pfed.engine.contact_sessions import Sessions
from p2pfed.engine.contact_steps import StepClock
from p2pfed.engine.contact_store import Store
from p2pfed.engine.contact_world import ContactWorld
from p2pfed.engine.delivery import Delivery
from p2pfed.engine.run_state import devices_state, load_devices_state
from p2pfed.network.contacts import ContactPlan
from p2pfed.device.energy import EnergyMeter
from p2pfed.results.recorder import Recorder
from p2pfed.transport.signing import Signing

__all__ = ["PROTOCOLS", "AsyncSchedule", "OpportunisticSimulation"]


class OpportunisticSimulation:
    """Asynchronous learning over a contact plan, with optional forwarding, loss and churn."""

    unit = "sim s"

    def __init__(self, algorithms: list[Algorithm], plan: ContactPlan, schedule: AsyncSchedule,
                 recorder: Recorder, rng: np.random.Generator, *, max_message_bytes: int,
                 forwarding: Forwarding = Forwarding(), offline: Sequence[tuple[int, float, float]] = (),
                 first_training_s: list[float] | None = None,
                 on_time: Callable[[float], None] | None = None, batched: bool = True,
                 precision: str = "float32", energy: EnergyMeter | None = None,
                 signing: Signing | None = None) -> None:
        """``offline``: (device, from, until) spans; ``first_training_s``: when each device first
        trains (default: a uniform random phase within one period, so clocks are not aligned);
        ``batched``: steps finishing together (``schedule.batch_window_s``) batch their arithmetic
        (``finish_together``; ``engine.batched_training``); ``precision``: the wire precision of
        shared float tensors, carried copies included (``engine.precision``); ``energy``: the
        devices' compute speed, energy and batteries (``devices``; None: not modelled, and none
        of it runs). A step then takes its work's time (its share is offered when it is done,
        and the next step starts no earlier); a device whose battery is empty is off, like an
        offline one, until a recharge. ``signing``: every share is signed by its device and every
        copy, carried ones included, checked by its receivers (``security.sign_artifacts``; None:
        not signed)."""
        if schedule.send_policy not in SEND_POLICIES:
            raise ValueError(f"unknown send policy {schedule.send_policy!r}; choose one of {SEND_POLICIES}")
        if schedule.protocol not in PROTOCOLS:
            raise ValueError(f"unknown contact protocol {schedule.protocol!r}; choose one of {PROTOCOLS}")
        n = len(algorithms)
        self.world = world = ContactWorld(n)
        self.algorithms = algorithms
        self.plan = plan
        self.schedule = schedule
        self.recorder = recorder
        self.rng = rng
        self.energy = energy
        first = (list(first_training_s) if first_training_s is not None else
                 list(rng.uniform(0, schedule.train_period_s, n)))
        self.loops = [DeviceLoop(i, algo, recorder, clock=world.now, max_message_bytes=max_message_bytes,
                                 neighbours=cast("Callable[[], list[int]]",
                                                 lambda i=i: self.plan.neighbours(i, world.now())),
                                 max_age_s=schedule.max_age_s, split_parts=schedule.send_policy != "whole",
                                 precision=precision, signer=None if signing is None else signing.signers[i])
                      for i, algo in enumerate(algorithms)]
        self.delivery = Delivery(algorithms, recorder,
                                 IntakeRules(max_message_bytes, max_age_s=schedule.max_age_s,
                                             hop_limit=forwarding.hop_limit, num_devices=n,
                                             keyring=None if signing is None else signing.keyring))
        self.store = Store(world.holdings, forwarding, lambda i: algorithms[i].kind(),
                           max_message_bytes=max_message_bytes, precision=precision,
                           send_policy=schedule.send_policy, max_age_s=schedule.max_age_s)
        self.availability = Availability(world, offline, energy, schedule.duration_s)
        self.clock = StepClock(world, self.loops, schedule, rng, self.availability, self.store, first, batched)
        self.evaluation = Evaluations(world, self.loops, schedule, batched=batched, energy=energy, on_time=on_time)
        self.protocol = PROTOCOL_CLASSES[schedule.protocol](world, plan, world.holdings, max_message_bytes)
        self.sessions = Sessions(world, plan, schedule, self.protocol, self.store, self.availability,
                                 self.delivery, recorder, rng, self.evaluation.interval)
        if energy is not None:
            energy.clock = world.now
            for i, loop in enumerate(self.loops):
                loop.count_work = True
                if energy.has_batteries:
                    loop.algorithm.ctx.battery = cast("Callable[[], float | None]", lambda i=i: energy.left_j(i))

    @property
    def env(self) -> simpy.Environment:
        """The run's environment (a restored run has a new one)."""
        return self.world.env

    @property
    def control(self) -> dict[str, int]:
        """The contact protocol's own messages and bytes."""
        return self.protocol.control

    @property
    def steps_taken(self) -> int:
        return self.clock.steps_taken

    @property
    def batches_taken(self) -> int:
        return self.clock.batches_taken

    # -- the runtime interface ---------------------------------------------------------------
    @property
    def evaluations(self) -> int:
        """How many evaluations the run makes (the last one at its end)."""
        return self.evaluation.total

    @property
    def total(self) -> int:
        """Where the run can stop: after each of its evaluations."""
        return self.evaluation.total

    @property
    def done(self) -> int:
        """Evaluations done."""
        return self.evaluation.evaluated

    @property
    def length(self) -> int:
        """The progress bar's length: simulated seconds."""
        return round(self.schedule.duration_s)

    def position(self) -> int:
        return round(self.world.now())

    def now(self) -> float:
        return self.world.now()

    def run(self) -> float:
        """Run until ``duration_s``; returns the simulated time at the end."""
        try:
            self.start()
            self.advance(self.evaluations)
        finally:
            self.close()
        return self.world.now()

    def start(self) -> None:
        """Start every process of a new run (``load_state_dict`` instead continues a saved one)."""
        self.clock.start()
        self.availability.start_churn()
        self.sessions.start()
        self.availability.start_recharges()
        self.evaluation.start()

    def advance(self, evaluations: int) -> None:
        """Run until ``evaluations`` evaluations are done: to the end, or (fewer) to a moment a
        checkpoint can describe, every event due at that evaluation's time processed."""
        assert self.evaluation.process is not None, "start() or load_state_dict() first"
        env = self.world.env
        if evaluations >= self.evaluations:
            env.run(until=self.evaluation.process)
            return
        env.run(until=self.evaluation.stop_event(evaluations))
        now = env.now
        while env.peek() <= now:
            env.step()

    def close(self) -> None:
        self.delivery.close()

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue after ``advance`` stopped short of the end, or, at the
        end, what the results need (checkpoint data)."""
        common = {"time": self.world.now(), "evaluated": self.done,
                  **devices_state(self.loops, self.delivery, self.recorder, self.rng, self.energy),
                  **self.protocol.state_dict()}
        if self.done >= self.evaluations:
            return {**common, "finished": True, "counts": [self.clock.steps_taken, self.clock.batches_taken],
                    "state": self.availability.device_states()}
        self.world.timeouts.read(self.world.env)
        return {**common, **self.evaluation.state_dict(), **self.clock.state_dict(), **self.sessions.state_dict(),
                **self.availability.state_dict(),
                "state": [{**a, **s} for a, s in zip(self.availability.device_states(), self.store.state_dict(),
                                                     strict=True)]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue a run saved by ``state_dict`` (on a simulation built from the same scenario,
        instead of ``start``): state back in place, every process in the wait it was in."""
        world = self.world
        world.restart(float(state["time"]))
        load_devices_state(state, self.loops, self.delivery, self.recorder, self.rng, self.energy)
        self.availability.load_device_states(state["state"])
        self.protocol.load_state_dict(state)
        if state.get("finished"):
            self.clock.load_counts(state)
            self.evaluation.evaluated = int(state["evaluated"])
            return
        interned = self.algorithms[0].ctx.shared.setdefault("checkpoint/payloads", weakref.WeakValueDictionary()) \
            if self.algorithms else {}
        self.store.load_state_dict(state["state"], interned)
        world.timeouts.recreate(world.env, [*Evaluations.pending(state), *StepClock.pending(state),
                                            *Sessions.pending(state), *Availability.pending(state)])
        self.evaluation.load_state_dict(state)
        self.clock.load_state_dict(state)
        self.sessions.load_contacts(state)
        self.availability.load_state_dict(state)
        self.clock.load_offers_later(state)
        self.sessions.load_sessions(state)

    def stats(self) -> dict[str, float | None]:
        """Per-device means worth reporting next to the communication counters."""
        n = max(len(self.loops), 1)
        return {
            "trainings_per_device": sum(loop.actions for loop in self.loops) / n,
            "fusions_per_device": sum(loop.fusions for loop in self.loops) / n,
            "mean_fused_age_s": self.recorder.mean_fused_age_s,
            "devices_per_batch": self.steps_taken / self.batches_taken if self.batches_taken else None,
            "offline_fraction": sum(self.availability.offline_s) / n / max(self.schedule.duration_s, 1e-12),
        }
