"""Evaluation in a contact run: every device every ``eval_every_s`` and at the end, all in one
step; a run asked to stop after some evaluations stops there, where a checkpoint can describe it."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

import simpy

from p2pfed.device import DeviceLoop, evaluate_together
from p2pfed.engine.contact_checkpoint import Pending
from p2pfed.engine.contact_schedule import AsyncSchedule
from p2pfed.engine.contact_world import ContactWorld
from p2pfed.device.energy import EnergyMeter


class Evaluations:
    """The evaluator process; ``on_time`` hears the simulated time after each evaluation."""

    def __init__(self, world: ContactWorld, loops: list[DeviceLoop], schedule: AsyncSchedule, *, batched: bool,
                 energy: EnergyMeter | None, on_time: Callable[[float], None] | None) -> None:
        self.world = world
        self.loops = loops
        self.schedule = schedule
        self.batched = batched
        self.energy = energy
        self.on_time = on_time
        self.total = schedule.evaluations
        self.evaluated = 0                                           # evaluations done
        self.next: tuple[int, float, simpy.Event] | None = None      # next index, its time, its timeout
        self.process: simpy.Process | None = None
        self.stop_after: int | None = None                           # evaluations before a stop
        self.stop: simpy.Event | None = None

    def interval(self) -> int:
        """The evaluation interval (0-based) traffic is counted in: rounds.csv rows are cumulative
        through the interval that ends with their evaluation."""
        return min(int(self.world.env.now // self.schedule.eval_every_s), max(self.total - 1, 0))

    def start(self, index: int = 0, t: float | None = None, wake: simpy.Event | None = None) -> None:
        self.process = self.world.env.process(self._evaluator(index, t, wake))

    def _evaluator(self, index: int, t: float | None, wake: simpy.Event | None) -> Generator[simpy.Event, Any, None]:
        """Evaluate every device every ``eval_every_s`` and at the end (``index``, ``t``: a
        restored run's next evaluation and its time)."""
        every, end, env = self.schedule.eval_every_s, self.schedule.duration_s, self.world.env
        t = every if t is None else t
        while True:
            t = min(t, end)
            self.next = (index, t, wake if wake is not None else env.timeout(t - env.now))
            yield self.next[2]
            wake = None
            evaluate_together(self.loops, index, batched=self.batched)
            if self.energy is not None:
                self.energy.snapshot(index)
            index += 1
            self.evaluated = index
            if self.on_time is not None:
                self.on_time(float(env.now))
            stop = self.stop
            if stop is not None and index == self.stop_after and not stop.triggered:
                stop.succeed()
            if t >= end:
                return
            t += every

    def stop_event(self, evaluations: int) -> simpy.Event:
        """An event that fires once ``evaluations`` evaluations are done."""
        self.stop_after, self.stop = evaluations, self.world.env.event()
        return self.stop

    def state_dict(self) -> dict[str, Any]:
        assert self.next is not None
        index, t, wake = self.next
        return {"evaluation": [index, t, self.world.timeouts.pending(wake)], "evaluated": self.evaluated}

    @staticmethod
    def pending(state: dict[str, Any]) -> Iterator[Pending]:
        yield state["evaluation"][2]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The evaluator again, waiting on the next evaluation."""
        self.evaluated = int(state["evaluated"])
        index, t, wake = state["evaluation"]
        self.start(int(index), float(t), self.world.timeouts.event(wake))
