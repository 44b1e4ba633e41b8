"""What the parts of a contact run share: the SimPy environment, each device's holdings, the
pulses that wake waiting transfers, and the bookkeeping of pending timeouts that lets every part
save what it waits on and wait on the same thing again after a restore.

A SimPy process is a generator and cannot be saved, but each process of the contact runtime
waits on one thing at a time, and each part keeps that description current. A checkpoint is
taken when every event due at an evaluation time has been processed; a restored run starts each
process again in the wait it was in, without deciding anything anew (deciding would have side
effects, such as a TTL drop or a battery check, at another moment than the uninterrupted run).
Bit-identical continuation also needs the order SimPy gives events due at the same time (by
creation): the pending timeouts are created again in their original creation order, read from
SimPy's queue, at their exact original times (``Timeouts``).
"""

from __future__ import annotations

from collections.abc import Iterable

import simpy

from p2pfed.device.exchange import Holdings
from p2pfed.engine.contact_checkpoint import Pending, timeout_at


class ContactWorld:
    """The environment and per-device holdings of one contact run, and its wake-up pulses:
    ``news`` (a device has something new to offer), ``switched`` (it went on or offline) and
    ``went_offline``."""

    def __init__(self, num_devices: int) -> None:
        self.num_devices = num_devices
        self.holdings = [Holdings() for _ in range(num_devices)]
        self.may_go_off = False     # churn or batteries: the availability pulses can fire
        self.timeouts = Timeouts()
        self.restart(0.0)

    def restart(self, now: float) -> None:
        """A fresh environment at ``now`` (a restored run), with fresh pulses."""
        self.env = simpy.Environment(initial_time=now)
        self.news = [self.env.event() for _ in range(self.num_devices)]
        self.switched = [self.env.event() for _ in range(self.num_devices)]
        self.went_offline = [self.env.event() for _ in range(self.num_devices)]

    def now(self) -> float:
        return float(self.env.now)

    def pulse(self, events: list[simpy.Event], i: int) -> None:
        """Wake whatever waits on ``events[i]``, and arm a new pulse in its place."""
        ev, events[i] = events[i], self.env.event()
        ev.succeed()

    def or_churn(self, event: simpy.Event, *pulses: simpy.Event) -> simpy.Event:
        """``event | pulse | ...`` with the availability pulses left out of a run where devices
        never go off: they never fire there, and each ``|`` costs a condition event on every wait."""
        for pulse in pulses if self.may_go_off else ():
            event = event | pulse
        return event

    def wake_at(self, t: float, wake: simpy.Event | None) -> simpy.Event:
        """``wake`` (a restored run's pending timeout) or a new timeout at ``t`` (now if past)."""
        return wake if wake is not None else self.env.timeout(max(t - self.env.now, 0.0))


class Timeouts:
    """Pending timeouts as checkpoint data: ``[time, SimPy's creation id]`` when saving, and
    the same timeouts again, in their creation order, when restoring."""

    def __init__(self) -> None:
        self._queue: dict[int, Pending] = {}
        self._made: dict[int, simpy.Event] = {}

    def read(self, env: simpy.Environment) -> None:
        """Note every event in ``env``'s queue (before ``pending`` is asked)."""
        self._queue = {id(ev): [float(t), int(eid)] for t, _, eid, ev in env._queue}   # SimPy's event heap

    def pending(self, ev: simpy.Event) -> Pending:
        return self._queue[id(ev)]

    def recreate(self, env: simpy.Environment, pending: Iterable[Pending]) -> None:
        """Create every saved timeout again, in the original creation order, at its time."""
        self._made = {int(eid): timeout_at(env, float(t)) for t, eid in sorted(pending, key=lambda p: p[1])}

    def event(self, p: Pending) -> simpy.Event:
        return self._made[int(p[1])]
