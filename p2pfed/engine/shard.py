"""One shard of a run of synchronous rounds split over several processes: some of the devices,
run exactly as the one-process runtime runs them.

A shard builds its own devices from the run spec (nothing else of the run's state travels), acts
for them at the start of each round, batched as in one process, and times every message they send
on its link as ``Simulation`` does. A message to a device of this shard is delivered here; one to
a device of another shard leaves in the shard's outbox — the encoded bytes the wire codec made and
the sockets carried, with when its last byte leaves and when it arrives — and the receiving shard
schedules its arrival before it runs past that time. The sender alone counts the bytes sent and
the transfer's completion, the receiver alone its delivery, drops and lateness, so the shards'
recorders merged are the one process's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p2pfed.device import load_checkpoint, save_checkpoint
from p2pfed.engine.delivery import Frame
from p2pfed.engine.offload import make_offload
from p2pfed.engine.rounds_build import rounds_simulation
from p2pfed.engine.simulation import Simulation, Transfer
from p2pfed.results.attack_success import device_view
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import build_algorithm, build_class_schedule, pooled_test_data
from p2pfed.scenario.loader import build, fingerprint
from p2pfed.scenario.threads import apply_torch_threads

SHARD_KIND = "simulation-shard"

# A message between shards: sender, receiver, the index of its bytes in its mail's payloads, whether
# the sockets refused it, the round it was shared in, when its last byte leaves and when it arrives.
Crossing = tuple[int, int, int, bool, int, float, float]


@dataclass
class Mail:
    """Messages between shards: each encoded share once (``payloads``), however many of the
    receiving shard's devices it goes to, and every link's transfer of one (``crossings``)."""

    payloads: list[bytes] = field(default_factory=list)
    crossings: list[Crossing] = field(default_factory=list)
    _index: dict[int, int] = field(default_factory=dict, repr=False)   # id(payload) -> its index

    def __getstate__(self) -> dict[str, Any]:
        return {"payloads": self.payloads, "crossings": self.crossings}   # ids mean nothing elsewhere

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.payloads, self.crossings, self._index = state["payloads"], state["crossings"], {}

    def add(self, data: bytes) -> int:
        """The index of ``data`` among the payloads (added once, the first time)."""
        if id(data) not in self._index:
            self._index[id(data)] = len(self.payloads)
            self.payloads.append(data)
        return self._index[id(data)]


class ShardSimulation(Simulation):
    """The synchronous runtime over one shard's devices; messages to other shards' devices go to
    ``outbox`` instead of a local arrival."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mine = set(self.devices)
        self.outbox = Mail()

    def _launch(self, transfer: Transfer) -> None:
        if transfer.dst in self.mine:
            super()._launch(transfer)
            return
        # to another shard: it schedules the arrival; here only the last byte leaving is timed
        frame = transfer.frame
        index = self.outbox.add(transfer.data if frame is None else frame.data)
        self.outbox.crossings.append((transfer.src, transfer.dst, index, frame is None, transfer.round,
                                      transfer.done_at, transfer.arrive_at))
        if not transfer.completed:
            key = self._transfer_ids
            self._transfer_ids += 1
            self.in_flight[key] = transfer
            self._at(transfer.done_at, lambda _: self._left(key, transfer))

    def _left(self, key: int, transfer: Transfer) -> None:
        transfer.completed = True
        self.recorder.transfer_completed(transfer.src)
        del self.in_flight[key]

    def take_in(self, inbox: Mail) -> None:
        """Messages from other shards' devices to this shard's: each arrives at its time, the
        receivers of one share taking one frame (decoded once here, as in one process)."""
        frames = [Frame(data) for data in inbox.payloads]
        for src, dst, index, refused, round, done_at, arrive_at in inbox.crossings:
            self._launch(Transfer(src, dst, inbox.payloads[index], None if refused else frames[index], round,
                                  done_at, arrive_at, completed=True))

    def step(self, r: int, inbox: Mail) -> Mail:
        """Take in ``inbox``, run to the start of round ``r``, act; the messages for other shards."""
        self.take_in(inbox)
        self._run_to(r * self.schedule.round_period_s)
        self._act(r)
        out, self.outbox = self.outbox, Mail()
        return out

    def settle(self, to: int, inbox: Mail) -> None:
        """Take in ``inbox`` and run to the end of round ``to`` - 1: the shard can stop there."""
        self.take_in(inbox)
        self._run_to(to * self.schedule.round_period_s)
        if to == self.schedule.rounds:
            self.delivery.close()
        self.next_round = to

    def _run_to(self, until: float) -> None:
        if until > self.env.now:
            self.env.run(until=until)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.outbox = Mail()   # messages in flight to other shards: the receivers saved their own copies


class Shard:
    """A shard's devices and runtime, built in the process that runs them (a Dask actor, or
    in-process): ``scenario`` is the resolved scenario as data, ``mark`` the run's fingerprint,
    which this process must resolve it to as well."""

    def __init__(self, scenario: dict[str, Any], source: str, base_dir: str, devices: list[int], mark: str,
                 threads: int | None = None) -> None:
        loaded = build(scenario, source, Path(base_dir))
        if fingerprint(loaded) != mark:
            raise ValueError(f"{source}: this worker resolves the scenario to another run than the client did "
                               "(a different p2pfed version, data file or method on the worker?)")
        sc = loaded.scenario
        if threads is None:
            apply_torch_threads(sc.engine.torch_threads)
        else:
            import torch
            torch.set_num_threads(threads)
        self.mark = mark
        self.busy_s = 0.0
        dataset = loaded.federation
        self.offload = make_offload(helper=False, batched=sc.engine.batched_training)
        pool = pooled_test_data(dataset) if sc.evaluation.generalization else None
        shared: dict[str, Any] = {}
        self.algorithms = [build_algorithm(loaded, dataset, i, shared, pooled_test=pool, offload=self.offload)
                           for i in devices]
        self.recorder = Recorder(devices)
        sim = rounds_simulation(loaded, self.algorithms, self.recorder, class_schedule=build_class_schedule(loaded),
                                devices=devices, cls=ShardSimulation)
        assert isinstance(sim, ShardSimulation)
        self.sim = sim

    def step(self, r: int, inbox: Mail) -> Mail:
        started = time.perf_counter()
        try:
            return self.sim.step(r, inbox)
        finally:
            self.busy_s += time.perf_counter() - started

    def settle(self, to: int, inbox: Mail) -> None:
        started = time.perf_counter()
        self.sim.settle(to, inbox)
        self.busy_s += time.perf_counter() - started

    def busy(self) -> float:
        """Wall seconds this shard has spent computing its rounds (not waiting for calls)."""
        return self.busy_s

    def recorded(self) -> dict[str, Any]:
        """What this shard's recorder holds (``Recorder.from_state``)."""
        return self.recorder.state_dict()

    def device_results(self, views: bool) -> dict[int, tuple[dict[str, Any], dict[str, Any] | None]]:
        """Each device's method statistics and, with ``views``, what the attack summary reads of it."""
        return {a.ctx.device_id: (a.stats(), device_view(a) if views else None) for a in self.algorithms}

    def save(self, path: str) -> None:
        """Write this shard's checkpoint to ``path`` (atomically)."""
        save_checkpoint(Path(path), SHARD_KIND, self.mark, self.sim.state_dict())

    def load(self, path: str) -> None:
        """Continue from the checkpoint ``save`` wrote to ``path``."""
        self.sim.load_state_dict(load_checkpoint(Path(path), SHARD_KIND, self.mark))

    def close(self) -> None:
        self.sim.close()
        self.offload.close()
