"""Synchronous rounds split over several processes (``engine.shards``), on Dask.

The devices are partitioned by the graph (``p2pfed.engine.partition``); each shard is a Dask actor
on its own worker that builds and runs its devices (``p2pfed.engine.shard``). A round is one call
per shard: it takes in the messages other shards sent it, runs to the round's start and acts; the
messages it sends to other shards' devices come back to this driver, which hands them to their
receivers' shards with the next call. That is early enough: a message leaves at the start of the
round it is shared in and arrives a link's latency later at the earliest, while the receiving
shard's clock still stands at that start until its next call. So the shards never wait on one
another within a round, and every device sees what it would see in one process.

A checkpoint is one file per shard, written by the shard where it runs (named with the round, so
a stop between two files leaves the previous set whole), and a small file here naming them.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from p2pfed.engine.shard import Mail, Shard
from p2pfed.extras import require
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.loader import fingerprint
from p2pfed.scenario.spec import RunSpec
from p2pfed.scenario.threads import machine_cores


class _Done:
    """The answer of an in-process shard's call, in the shape of a Dask actor's future."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self) -> Any:
        return self._value


class InProcess:
    """A shard in this process, called as a Dask actor is: each call returns a future, and its
    arguments and answer are copied on the way (through the same ``__getstate__`` pickling uses),
    so that, as between processes, the shard and this driver share no object."""

    def __init__(self, shard: Shard) -> None:
        self.shard = shard

    def __getattr__(self, name: str) -> Callable[..., _Done]:
        method = getattr(self.shard, name)
        return lambda *args: _Done(copy.deepcopy(method(*copy.deepcopy(args))))


def shard_args(loaded: RunSpec, parts: Sequence[Sequence[int]]) -> list[tuple[Any, ...]]:
    """The arguments each shard is built from: the resolved scenario as data, never its objects."""
    data, mark = loaded.scenario.model_dump(exclude_unset=True), fingerprint(loaded)
    return [(data, loaded.source, str(loaded.base_dir), list(part), mark) for part in parts]


@contextmanager
def dask_shards(loaded: RunSpec, parts: Sequence[Sequence[int]]) -> Iterator[list[Any]]:
    """One Dask actor per shard, each on its own worker where there are enough: on the scheduler
    ``engine.scheduler`` names, or on a local cluster of one process per shard."""
    dask: Any = require("distributed", extra="sweeps", package="Dask", needed_by="engine.shards")
    engine = loaded.scenario.engine
    if logging.getLogger().getEffectiveLevel() > logging.INFO:   # Dask's INFO lines only with -v
        logging.getLogger("distributed").setLevel(logging.ERROR)
    cluster, threads = None, None
    if engine.scheduler is None:
        cluster = dask.LocalCluster(n_workers=len(parts), threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.ERROR)
        threads = max(1, machine_cores() // len(parts)) if engine.torch_threads == "auto" else engine.torch_threads
        client = dask.Client(cluster)
    else:
        try:
            client = dask.Client(engine.scheduler, timeout="20s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise ValueError(f"engine.scheduler: {engine.scheduler}: cannot connect: {exc}") from None
    try:
        workers = sorted(client.scheduler_info()["workers"])
        futures = [client.submit(Shard, *args, threads, actor=True, pure=False, workers=[workers[k % len(workers)]])
                   for k, args in enumerate(shard_args(loaded, parts))]
        actors: list[Any] = [f.result() for f in futures]
        try:
            yield actors
        finally:
            for actor in actors:
                actor.close().result()
            del futures, actors
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


class ShardedRounds:
    """The synchronous runtime (``Runtime``) over shards: ``shards`` are Dask actors or
    ``InProcess`` shards, built over ``parts``; ``recorder`` gets the shards' recorders merged
    after each ``advance``; ``checkpoint``: where the run's checkpoint file goes (the shards' go
    beside it)."""

    unit = "round"

    def __init__(self, shards: Sequence[Any], parts: Sequence[Sequence[int]], loaded: RunSpec, recorder: Recorder, *,
                 on_round: Callable[[int], None] | None = None, checkpoint: Path | None = None) -> None:
        self.shards = list(shards)
        self.parts = [list(p) for p in parts]
        self.owner = {d: k for k, part in enumerate(self.parts) for d in part}
        self.recorder = recorder
        self.rounds = loaded.scenario.rounds
        self.period = loaded.scenario.engine.round_period_s
        self.on_round = on_round
        self.checkpoint = checkpoint
        self.next_round = 0
        self.crossed: list[list[int]] = []   # per round: [messages, bytes] between shards
        self._inbox = [Mail() for _ in self.parts]
        self._kept: list[str] = []   # the shard files the last checkpoint names
        self.wall_s = 0.0            # wall seconds spent in ``advance``
        self.rounds_run = 0          # rounds run by this driver (not restored from a checkpoint)

    @property
    def total(self) -> int:
        return self.rounds

    @property
    def done(self) -> int:
        return self.next_round

    @property
    def length(self) -> int:
        return self.rounds

    def position(self) -> int:
        return self.next_round

    def now(self) -> float:
        return self.next_round * self.period

    def start(self) -> None:
        """Nothing to start: the shards were built ready."""

    def advance(self, to: int) -> None:
        """Run rounds ``next_round`` .. ``to`` - 1, every shard at once in each."""
        started = time.perf_counter()
        for r in range(self.next_round, to):
            calls = [s.step(r, box) for s, box in zip(self.shards, self._inbox, strict=True)]
            self._route([c.result() for c in calls])
            if self.on_round is not None:
                self.on_round(r)
        for call in [s.settle(to, box) for s, box in zip(self.shards, self._inbox, strict=True)]:
            call.result()
        self.wall_s += time.perf_counter() - started
        self.rounds_run += to - self.next_round
        self._inbox = [Mail() for _ in self.parts]
        self.next_round = to
        self._gather()

    def _route(self, outboxes: list[Mail]) -> None:
        """The shards' messages to their receivers' shards, each share once per receiving shard
        (however many of its devices it goes to); what crossed is counted so."""
        self._inbox = [Mail() for _ in self.parts]
        for out in outboxes:
            for src, dst, index, refused, round, done_at, arrive_at in out.crossings:
                inbox = self._inbox[self.owner[dst]]
                inbox.crossings.append((src, dst, inbox.add(out.payloads[index]), refused, round, done_at, arrive_at))
        self.crossed.append([sum(len(m.payloads) for m in self._inbox),
                             sum(len(p) for m in self._inbox for p in m.payloads)])

    def _gather(self) -> None:
        """The shards' recorders merged into ``recorder``, in device order."""
        parts = [Recorder.from_state(c.result()) for c in [s.recorded() for s in self.shards]]
        merged = Recorder.merge(parts, devices=range(self.recorder.num_devices))
        self.recorder.load_state_dict(merged.state_dict())

    def device_results(self, views: bool) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
        """Every device's method statistics, in device order, and with ``views`` what the attack
        summary reads of each device."""
        results: dict[int, tuple[dict[str, Any], Any]] = {}
        for call in [s.device_results(views) for s in self.shards]:
            results.update(call.result())
        ordered = [results[d] for d in sorted(results)]
        return [stats for stats, _ in ordered], {d: results[d][1] for d in sorted(results) if views}

    def crossing_summary(self) -> dict[str, Any]:
        """What summary.json reports of the split: shards, their sizes, what crossed per round,
        and the wall seconds per round of each shard's computing and of the whole round (the
        rounds this driver ran)."""
        rounds, ran = max(len(self.crossed), 1), max(self.rounds_run, 1)
        busy = [float(c.result()) for c in [s.busy() for s in self.shards]]
        return {"shards": len(self.parts), "devices_per_shard": [len(p) for p in self.parts],
                "messages_across_per_round": sum(m for m, _ in self.crossed) / rounds,
                "bytes_across_per_round": sum(b for _, b in self.crossed) / rounds,
                "shard_compute_s_per_round": [round(b / ran, 6) for b in busy],
                "wall_s_per_round": round(self.wall_s / ran, 6)}

    # -- checkpoints -------------------------------------------------------------------------
    def _shard_file(self, k: int, round: int) -> Path:
        assert self.checkpoint is not None
        return self.checkpoint.with_name(f"{self.checkpoint.name}.shard{k}-round{round}")

    def state_dict(self) -> dict[str, Any]:
        """Each shard writes its checkpoint file; what is returned names them (and the rounds'
        crossing counts). Files of rounds before the last saved are removed."""
        if self.checkpoint is None:
            raise ValueError("a sharded run saves its state only with a checkpoint path")
        files = [self._shard_file(k, self.next_round) for k in range(len(self.shards))]
        for call in [s.save(str(f)) for s, f in zip(self.shards, files, strict=True)]:
            call.result()
        keep = {f.name for f in files} | set(self._kept)
        for old in self.checkpoint.parent.glob(f"{self.checkpoint.name}.shard*-round*"):
            if old.name not in keep:
                old.unlink()
        self._kept = [f.name for f in files]
        return {"next_round": self.next_round, "parts": self.parts, "files": [f.name for f in files],
                "crossed": self.crossed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict``'s files (the same partition: the same scenario)."""
        if [list(map(int, p)) for p in state["parts"]] != self.parts:
            raise ValueError(f"{self.checkpoint}: written for another partition of the devices")
        assert self.checkpoint is not None
        for call in [s.load(str(self.checkpoint.with_name(name)))
                     for s, name in zip(self.shards, state["files"], strict=True)]:
            call.result()
        self.next_round = int(state["next_round"])
        self.crossed = [[int(m), int(b)] for m, b in state["crossed"]]
        self._kept = list(state["files"])
        self._gather()

    def close(self) -> None:
        """The shards are closed by whoever built them."""


@contextmanager
def local_shards(loaded: RunSpec, parts: Sequence[Sequence[int]]) -> Iterator[list[Any]]:
    """Every shard in this process (tests, and a look at the split without Dask)."""
    shards = [Shard(*args) for args in shard_args(loaded, parts)]
    try:
        yield [InProcess(s) for s in shards]
    finally:
        for shard in shards:
            shard.close()

