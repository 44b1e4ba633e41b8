"""Availability in a contact run: devices going offline and back on their churn spans, batteries
that run empty (a device then stops, as an offline one, and its transfers in flight are cut) and
the recharges that bring them back."""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import Any

import simpy

from p2pfed.engine.contact_checkpoint import Pending
from p2pfed.engine.contact_world import ContactWorld
from p2pfed.device.energy import EnergyMeter


class Availability:
    """Which devices are up; ``offline``: (device, from, until) spans; ``energy``: the devices'
    batteries (None: not modelled)."""

    def __init__(self, world: ContactWorld, offline: Sequence[tuple[int, float, float]],
                 energy: EnergyMeter | None, duration_s: float) -> None:
        self.world = world
        self.offline = sorted(offline, key=lambda x: (x[1], x[0]))
        self.energy = energy
        self.duration_s = duration_s
        self.online = [True] * world.num_devices
        self.offline_s = [0.0] * world.num_devices
        self.churn_waits: dict[int, tuple[int, bool, simpy.Event]] = {}   # span, back on?, wake
        self.recharge_wait: simpy.Event | None = None
        world.may_go_off = bool(self.offline) or (energy is not None and energy.has_batteries)

    def up(self, i: int) -> bool:
        """Online (churn) and with energy left (batteries)."""
        return self.online[i] and (self.energy is None or self.energy.powered[i])

    def has_energy(self, i: int) -> bool:
        """Whether device i may act now; the first time its battery is found empty it stops, and
        its transfers in flight are aborted (as when it goes offline)."""
        assert self.energy is not None
        was_on = self.energy.powered[i]
        if self.energy.check(i, self.world.now()):
            return True
        if was_on:
            self.world.pulse(self.world.went_offline, i)
            self.world.pulse(self.world.switched, i)
        return False

    def churn_spans(self) -> dict[int, list[tuple[float, float]]]:
        """Each churning device's offline spans, in time order."""
        spans: dict[int, list[tuple[float, float]]] = {}
        for i, off_from, off_until in self.offline:
            spans.setdefault(i, []).append((off_from, off_until))
        return spans

    def start_churn(self) -> None:
        """The churn processes of a new run."""
        for i, spans in self.churn_spans().items():
            self.world.env.process(self._churn(i, spans))

    def start_recharges(self) -> None:
        """The recharges of a new run (with batteries on a recharge schedule)."""
        if self.energy is not None and self.energy.next_recharge is not None:
            self.world.env.process(self._recharges())

    def _churn(self, i: int, spans: list[tuple[float, float]], first: int = 0, back: bool = False,
               wake: simpy.Event | None = None) -> Generator[simpy.Event, Any, None]:
        """Device i off and on again over its ``spans`` (a restored run: from span ``first``,
        waiting to go off, or with ``back`` to come back, on ``wake``)."""
        world = self.world
        for k in range(first, len(spans)):
            off_from, off_until = spans[k]
            if not (back and k == first):
                self.churn_waits[i] = (k, False, world.wake_at(off_from, wake))
                wake = None
                yield self.churn_waits[i][2]
                self.online[i] = False
                world.pulse(world.went_offline, i)
                world.pulse(world.switched, i)
            self.churn_waits[i] = (k, True, world.wake_at(off_until, wake))
            wake = None
            yield self.churn_waits[i][2]
            self.online[i] = True
            self.offline_s[i] += off_until - off_from
            world.pulse(world.switched, i)
        self.churn_waits.pop(i, None)

    def _recharges(self, wake: simpy.Event | None = None) -> Generator[simpy.Event, Any, None]:
        """Every battery full again on the schedule; stopped devices run again."""
        assert self.energy is not None
        while self.energy.next_recharge is not None and self.energy.next_recharge < self.duration_s:
            self.recharge_wait = self.world.wake_at(self.energy.next_recharge, wake)
            wake = None
            yield self.recharge_wait
            for i in self.energy.recharge_due(self.world.now()):
                self.world.pulse(self.world.switched, i)
        self.recharge_wait = None

    # -- checkpoints -----------------------------------------------------------------------
    def device_states(self) -> list[dict[str, Any]]:
        return [{"online": on, "offline_s": s} for on, s in zip(self.online, self.offline_s, strict=True)]

    def load_device_states(self, saved: list[dict[str, Any]]) -> None:
        self.online = [bool(s["online"]) for s in saved]
        self.offline_s = [float(s["offline_s"]) for s in saved]

    def state_dict(self) -> dict[str, Any]:
        """What the churn processes and the recharges wait on."""
        pending = self.world.timeouts.pending
        return {"churn": [[i, k, back, pending(ev)] for i, (k, back, ev) in sorted(self.churn_waits.items())],
                "recharge": None if self.recharge_wait is None else pending(self.recharge_wait)}

    @staticmethod
    def pending(state: dict[str, Any]) -> Iterator[Pending]:
        yield from (c[3] for c in state["churn"])
        if state["recharge"] is not None:
            yield state["recharge"]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Every churn process and the recharges again, in the wait they were in."""
        env, ev = self.world.env, self.world.timeouts.event
        spans = self.churn_spans()
        for i, k, back, p in state["churn"]:
            env.process(self._churn(int(i), spans[int(i)], int(k), bool(back), ev(p)))
        if state["recharge"] is not None:
            env.process(self._recharges(ev(state["recharge"])))
