"""The SimPy runtime: every device is a process, every link delays bytes by latency + size/bandwidth.

Simulated time is separate from wall time: a round takes ``round_period_s`` simulated seconds
however long the arithmetic takes. Each message is encoded once by the wire codec, held for the
simulated transfer time, then pushed through a real ZeroMQ inproc socket into the receiver's
mailbox and decoded there, so byte counts are real encoded sizes and a bad message is caught
exactly where a real peer would catch it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx
import numpy as np
import simpy

from p2pfed.algorithms.base import Algorithm, Payload
from p2pfed.data.dynamic import ClassSchedule
from p2pfed.engine.delivery import Delivery, encode_share
from p2pfed.results.recorder import Recorder

log = logging.getLogger("p2pfed.engine")


@dataclass(frozen=True)
class RoundSchedule:
    rounds: int
    round_period_s: float
    participation: float = 1.0   # fraction of devices that train and share in a round
    eval_every: int = 1

    def evaluates(self, r: int) -> bool:
        return (r + 1) % self.eval_every == 0 or r == self.rounds - 1


class Simulation:
    """Synchronous rounds over a static graph: train, share with neighbours, fuse, evaluate."""

    def __init__(self, algorithms: list[Algorithm], graph: nx.Graph, schedule: RoundSchedule,
                 recorder: Recorder, rng: np.random.Generator, *, max_message_bytes: int,
                 on_round: Callable[[int, float], None] | None = None,
                 class_schedule: ClassSchedule | None = None) -> None:
        self.env = simpy.Environment()
        self.algorithms = algorithms
        self.graph = graph
        self.schedule = schedule
        self.recorder = recorder
        self.rng = rng
        self.max_message_bytes = max_message_bytes
        self.on_round = on_round
        self.class_schedule = class_schedule
        self.delivery = Delivery(algorithms, recorder, max_message_bytes)
        for i, algo in enumerate(algorithms):
            algo.ctx.neighbours = lambda i=i: sorted(graph.neighbors(i))
        # One FIFO per direction of each edge: transfers on a link queue behind each other.
        self.links = {(a, b): simpy.Resource(self.env, capacity=1)
                      for u, v in graph.edges for a, b in ((u, v), (v, u))}
        self._evaluations: dict[int, list] = {}

    # -- processes -------------------------------------------------------------------------
    def _device(self, i: int, active_by_round: np.ndarray):
        """One device's loop, FedSub Alg. 1 order: integrate what peers sent during the last
        round, train on the result, evaluate the model the device now holds, share."""
        algo = self.algorithms[i]
        period = self.schedule.round_period_s
        for r in range(self.schedule.rounds):
            if self.class_schedule is not None:
                algo.ctx.set_visible_classes(self.class_schedule.visible(i, r))
            algo.fuse(r, self.env.now)
            if active_by_round[r, i]:
                algo.train(r)
            if self.schedule.evaluates(r):
                self._collect(r, i, algo.evaluate())
            if active_by_round[r, i]:
                payload = algo.share(r)
                if payload is not None:
                    self._broadcast(i, r, algo.message_kind, payload)
            if i == len(self.algorithms) - 1 and self.on_round is not None:
                self.on_round(r, float(self.env.now))
            yield self.env.timeout((r + 1) * period - self.env.now)

    def _broadcast(self, src: int, r: int, kind: str, payload: Payload) -> None:
        data = encode_share(kind, src, r, float(self.env.now), payload, self.max_message_bytes)
        for dst in sorted(self.graph.neighbors(src)):
            self.recorder.sent(src, len(data), r)
            self.recorder.transfer_started(src)
            self.env.process(self._transfer(src, dst, data, r))

    def _transfer(self, src: int, dst: int, data: bytes, r: int):
        edge = self.graph.edges[src, dst]
        with self.links[src, dst].request() as slot:
            yield slot
            yield self.env.timeout(8.0 * len(data) / edge["bandwidth_bps"])
        self.recorder.transfer_completed(src)
        yield self.env.timeout(edge["latency_s"])
        self.delivery.deliver(src, dst, data, float(self.env.now), r)

    def _collect(self, r: int, i: int, evaluation) -> None:
        evals = self._evaluations.setdefault(r, [None] * len(self.algorithms))
        evals[i] = evaluation
        if all(e is not None for e in evals):
            self.recorder.evaluation(r, float(self.env.now), evals)
            del self._evaluations[r]

    # -- driver ----------------------------------------------------------------------------
    def run(self) -> float:
        """Run all rounds; returns the simulated time at the end."""
        n = len(self.algorithms)
        active = self.rng.random((self.schedule.rounds, n)) < self.schedule.participation
        try:
            for i in range(n):
                self.env.process(self._device(i, active))
            # Stop at the end of the last round: bytes still in flight then never arrive.
            self.env.run(until=self.schedule.rounds * self.schedule.round_period_s)
        finally:
            self.delivery.close()
        return float(self.env.now)
