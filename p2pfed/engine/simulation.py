"""The synchronous SimPy runtime: every device is a process, every link delays bytes by
latency + size/bandwidth (and its first bytes until its connection is up, where the scenario
models connection setup).

Simulated time is separate from wall time: a round takes ``round_period_s`` simulated seconds
however long the arithmetic takes. At the start of each round every device acts through its
``DeviceLoop`` (fuse → train → evaluate → share), all of them in one step (``act_together``),
so that the devices whose methods train plainly train as one batched computation; each share is
encoded once, pushed through a real ZeroMQ inproc socket once for all its receivers, and queued
on a first-in-first-out link per direction of each edge; when its last byte has crossed a link
it goes into that receiver's intake. Byte counts are real encoded sizes, and a bad message is
caught exactly where a real peer would catch it.

A run can stop at any round boundary and continue later from ``state_dict`` — devices, links,
messages in flight, counters and random streams — with bit-identical results.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import networkx as nx
import numpy as np
import simpy
import torch

from p2pfed.algorithms import Algorithm
from p2pfed.data.dynamic import ClassSchedule
from p2pfed.device import DeviceLoop, IntakeRules, Outgoing, act_together
from p2pfed.device.contact_protocol import wire_bytes
from p2pfed.network.slow_start import Window
from p2pfed.network.slow_start import send as send_in_flights
from p2pfed.engine.delivery import Delivery, Frame
from p2pfed.engine.run_state import devices_state, load_devices_state
from p2pfed.device.energy import EnergyMeter
from p2pfed.results.recorder import Recorder
from p2pfed.transport.signing import Signing

log = logging.getLogger("p2pfed.engine")


@dataclass(frozen=True)
class RoundSchedule:
    rounds: int
    round_period_s: float
    participation: float = 1.0   # fraction of devices that train and share in a round
    eval_every: int = 1
    eval_when: str = "after-fusion"   # where in a device's round it is evaluated (evaluation.when)
    eval_both: bool = False           # and the other point too (evaluation.both)

    def evaluates(self, r: int) -> bool:
        return (r + 1) % self.eval_every == 0 or r == self.rounds - 1


@dataclass
class Transfer:
    """One message on one link direction: when its last byte leaves and when it arrives.
    ``frame`` is what came out of the sockets (None: they refused it), shared by the broadcast's
    links; ``data`` is what was sent."""

    src: int
    dst: int
    data: bytes
    frame: Frame | None
    round: int
    done_at: float
    arrive_at: float
    completed: bool = False


class Simulation:
    """Synchronous rounds over a static graph."""

    unit = "round"

    def __init__(self, algorithms: list[Algorithm], graph: nx.Graph, schedule: RoundSchedule,
                 recorder: Recorder, rng: np.random.Generator, *, max_message_bytes: int,
                 on_round: Callable[[int, float], None] | None = None,
                 class_schedule: ClassSchedule | None = None, batched_training: bool = True,
                 precision: str = "float32", energy: EnergyMeter | None = None,
                 setup_round_trips: float = 0.0, framing: bool = False, slow_start: bool = False,
                 signing: Signing | None = None, devices: Sequence[int] | None = None) -> None:
        """``rng``: the stream that draws which devices take part in each round;
        ``precision``: the wire precision of shared float tensors (``engine.precision``);
        ``batched_training``: train the plain-training devices of a round as one batched
        computation (``engine.batched_training``), equal to one at a time to float rounding;
        ``energy``: the devices' compute speed, energy and batteries (``devices``; None: not
        modelled, and none of it runs). A step then takes its work's time: its share leaves that
        long after the round starts; a device whose battery is empty neither trains, shares nor
        receives until a recharge (it is still evaluated on the model it holds).
        ``setup_round_trips``: a link's first byte leaves no earlier than that many round trips
        (2 x its latency) after the run starts, the time a real connection takes to open
        (``topology.setup_round_trips``); ``framing``: a message occupies its link for its bytes on
        the wire, framing and TCP/IP headers included (``device.contact_protocol.wire_bytes``;
        ``topology.framing``), not its encoded bytes alone; ``slow_start``: a message leaves in
        flights of TCP's congestion window, restarted after the link was idle
        (``network.slow_start``; ``topology.slow_start``); ``signing``: every share is signed by
        its device and checked by its receivers (``security.sign_artifacts``; None: not signed);
        ``devices``: the ids of ``algorithms`` among the graph's nodes (default: all of them, in
        order), fewer where this process runs one shard of a larger run."""
        self.algorithms = algorithms
        self.graph = graph
        self.schedule = schedule
        self.recorder = recorder
        self.rng = rng
        self.on_round = on_round
        self.batched_training = batched_training
        n = len(algorithms) if devices is None else graph.number_of_nodes()
        self.devices = list(range(len(algorithms))) if devices is None else [int(d) for d in devices]
        self.slot = {d: k for k, d in enumerate(self.devices)}   # device id -> its loop's index
        self.neighbours = [sorted(graph.neighbors(i)) for i in range(n)]
        self.loops = [DeviceLoop(i, algo, recorder, clock=self.now, max_message_bytes=max_message_bytes,
                                 neighbours=self.neighbours[i].copy, evaluate_when=schedule.eval_when,
                                 evaluate_both=schedule.eval_both, precision=precision,
                                 signer=None if signing is None else signing.signers[i],
                                 visible_classes=None if class_schedule is None
                                 else cast("Callable[[int], frozenset[int] | None]",
                                           lambda r, i=i: class_schedule.visible(i, r)))
                      for i, algo in zip(self.devices, algorithms, strict=True)]
        self.delivery = Delivery(algorithms, recorder,
                                 IntakeRules(max_message_bytes, rounds=schedule.rounds, num_devices=n,
                                             keyring=None if signing is None else signing.keyring),
                                 devices=self.devices)
        self.next_round = 0
        self.free_at: dict[tuple[int, int], float] = {}   # when each link direction is free again
        self.setup_round_trips = setup_round_trips      # before its first use: when its connection is up
        self.framing = framing
        self.windows: dict[tuple[int, int], Window] | None = {} if slow_start else None   # per link direction
        self.in_flight: dict[int, Transfer] = {}
        self._transfer_ids = 0
        self._active: tuple[int, np.ndarray] | None = None
        self.env = simpy.Environment()
        self.energy = energy
        if energy is not None:
            self._meter_devices(energy)

    def _meter_devices(self, energy: EnergyMeter) -> None:
        """The energy meter reads this runtime's clock, the devices count their work and read
        their batteries."""
        energy.clock = self.now
        for i, loop in zip(self.devices, self.loops):
            loop.count_work = True
            if energy.has_batteries:
                loop.algorithm.ctx.battery = cast("Callable[[], float | None]", lambda i=i: energy.left_j(i))

    def now(self) -> float:
        return float(self.env.now)

    # -- processes -------------------------------------------------------------------------
    def _rounds(self, until: int) -> Generator[simpy.Event, Any, None]:
        """Every device acts at the start of each round, all in one step."""
        period = self.schedule.round_period_s
        for r in range(self.next_round, until):
            yield self.env.timeout(r * period - self.env.now)
            self._act(r)

    def _act(self, r: int) -> None:
        """Round ``r`` starts: every device here acts, and its shares leave."""
        active = [bool(a) for a in self._active_row(r)]
        if self.energy is not None:
            active = self._powered(r, active)
        shares = act_together(self.loops, r, train=[active[i] for i in self.devices],
                              evaluate=self.schedule.evaluates(r), batched=self.batched_training)
        for i, outs in zip(self.devices, shares, strict=True):
            took = 0.0 if self.energy is None else self._step_done(i, active[i])
            if took is None:
                continue
            for out in outs:
                self._broadcast(i, out, out.sent_at + took)
        if self.on_round is not None:
            self.on_round(r, self.now())

    def _active_row(self, r: int) -> np.ndarray:
        """Which devices take part in round ``r``, drawn once per round, in round order."""
        if self._active is None or self._active[0] != r:
            n = len(self.neighbours)
            row = (self.rng.random(n) < self.schedule.participation if self.schedule.participation < 1
                   else np.ones(n, dtype=bool))
            self._active = (r, row)
        return self._active[1]

    def _powered(self, r: int, active: list[bool]) -> list[bool]:
        """Round ``r`` starts: recharges due, the energy of round r - 1 noted, and which devices
        still have energy (a device without takes no part)."""
        assert self.energy is not None
        now = self.now()
        self.energy.recharge_due(now)
        if r > 0:
            self.energy.snapshot(r - 1)
        return [self.energy.check(i, now) and a for i, a in enumerate(active)]

    def _step_done(self, i: int, trained: bool) -> float | None:
        """Charge device i's step: how long it took (its share leaves then), or None if it used
        up the battery (its share never leaves)."""
        assert self.energy is not None
        loop = self.loops[self.slot[i]]
        if not trained:   # it may still have fused
            self.energy.charge_work(i, loop.work_flops, loop.fusion_flops)
            return 0.0
        took = self.energy.charge_step(i, loop.work_flops, loop.fusion_flops)
        return took if self.energy.check(i, self.now() + took) else None

    def _broadcast(self, src: int, out: Outgoing, now: float) -> None:
        """Carry one encoded share through the sockets once, and queue it on the link to every
        neighbour, or to the one it is addressed to (first in, first out)."""
        size = len(out.data)
        destinations = [d for d in self.neighbours[src] if out.to is None or d == out.to]
        if self.energy is not None:   # a device whose battery is empty receives nothing
            destinations = [d for d in destinations if self.energy.powered[d]]
        if not destinations:
            return
        frame = self.delivery.carry(out.frame(), destinations)
        edges = self.graph[src]
        for dst in destinations:
            self.recorder.sent(src, size, out.round)
            self.recorder.transfer_started(src)
            edge = edges[dst]
            start = max(now, self.free_at.get((src, dst), self.setup_round_trips * 2 * edge["latency_s"]))
            on_wire = wire_bytes(size) if self.framing else size
            if self.windows is None:
                done = start + 8.0 * on_wire / edge["bandwidth_bps"]
            else:
                window = self.windows.setdefault((src, dst), Window())
                done = send_in_flights(window, start, on_wire, edge["bandwidth_bps"], 2 * edge["latency_s"])
            self.free_at[src, dst] = done
            if self.energy is not None:   # both radios busy while the bytes are on the link
                self.energy.radio_busy(src, start, done)
                self.energy.radio_busy(dst, start + edge["latency_s"], done + edge["latency_s"])
            self._launch(Transfer(src, dst, out.data, frame, out.round, done, done + edge["latency_s"]))

    def _launch(self, transfer: Transfer) -> None:
        """Two timed callbacks per transfer: its last byte leaves, then it arrives."""
        key = self._transfer_ids
        self._transfer_ids += 1
        self.in_flight[key] = transfer
        if transfer.completed:
            self._at(transfer.arrive_at, lambda _: self._arrive(key, transfer))
        else:
            self._at(transfer.done_at, lambda _: self._complete(key, transfer))

    def _at(self, when: float, callback: Callable[[simpy.Event], None]) -> None:
        self.env.timeout(when - self.env.now).callbacks.append(callback)

    def _complete(self, key: int, t: Transfer) -> None:
        t.completed = True
        self.recorder.transfer_completed(t.src)
        self._at(t.arrive_at, lambda _: self._arrive(key, t))

    def _arrive(self, key: int, t: Transfer) -> None:
        del self.in_flight[key]
        now = float(self.env.now)
        if self.delivery.take(t.src, t.dst, t.frame, now, t.round) is not None \
                and now > (t.round + 1) * self.schedule.round_period_s:   # after the fusion it was for
            self.recorder.late(t.dst)

    # -- the runtime interface -------------------------------------------------------------
    @property
    def total(self) -> int:
        """Where the run can stop: after each of its rounds."""
        return self.schedule.rounds

    @property
    def done(self) -> int:
        return self.next_round

    @property
    def length(self) -> int:
        return self.schedule.rounds

    def position(self) -> int:
        return self.next_round

    def start(self) -> None:
        """Nothing to start: each ``advance`` runs its rounds."""

    def advance(self, to: int) -> None:
        self.run(until_round=to)

    def run(self, until_round: int | None = None) -> float:
        """Run the rounds from ``next_round`` up to ``until_round`` (default: the last); returns
        the simulated time. Bytes still in flight at the end of the last round never arrive;
        at an earlier stop they stay in flight, in ``state_dict``."""
        end = self.schedule.rounds if until_round is None else min(until_round, self.schedule.rounds)
        self.env.process(self._rounds(end))
        try:
            self.env.run(until=end * self.schedule.round_period_s)
        finally:
            if end == self.schedule.rounds:
                self.delivery.close()
        if end == self.schedule.rounds and self.energy is not None:
            self.energy.snapshot(end - 1)
        self.next_round = end
        return float(self.env.now)

    def close(self) -> None:
        self.delivery.close()

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue from ``next_round``: checkpoint data (tensors, numbers,
        strings, lists, dicts), for ``torch.save`` and ``torch.load(weights_only=True)``."""
        return {
            "next_round": self.next_round,
            "time": float(self.env.now),
            **devices_state(self.loops, self.delivery, self.recorder, self.rng, self.energy),
            "free_at": [[s, d, t] for (s, d), t in sorted(self.free_at.items())],
            "windows": [[s, d, w.segments, w.last_sent_at] for (s, d), w in sorted((self.windows or {}).items())],
            "in_flight": [{"src": t.src, "dst": t.dst, "round": t.round, "done_at": t.done_at,
                           "arrive_at": t.arrive_at, "completed": t.completed, "refused": t.frame is None,
                           "data": torch.frombuffer(bytearray(t.data), dtype=torch.uint8)}
                          for _, t in sorted(self.in_flight.items())],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue a run saved by ``state_dict`` (on a Simulation built from the same scenario)."""
        self.next_round = int(state["next_round"])
        self.env = simpy.Environment(initial_time=float(state["time"]))
        load_devices_state(state, self.loops, self.delivery, self.recorder, self.rng, self.energy)
        self.free_at = {(int(s), int(d)): float(t) for s, d, t in state["free_at"]}
        if self.windows is not None:
            self.windows = {(int(s), int(d)): Window(float(w), float(t)) for s, d, w, t in state.get("windows", [])}
        self.in_flight.clear()
        for t in state["in_flight"]:
            data = t["data"].numpy().tobytes()
            frame = None if t.get("refused") else Frame(data)
            self._launch(Transfer(t["src"], t["dst"], data, frame, t["round"],
                                  t["done_at"], t["arrive_at"], t["completed"]))
