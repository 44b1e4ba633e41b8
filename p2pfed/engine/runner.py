"""Run one scenario in the simulator and produce its results (the ``p2pfed run`` job).

Without a ``contacts`` section (``contacts.kind: none``) devices run synchronous rounds over the
static ``topology`` graph; any other contact kind runs the opportunistic runtime. Synchronous
runs can checkpoint at round boundaries, contact runs at evaluations, and continue from there
with identical results.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from p2pfed.algorithms import Algorithm
from p2pfed.device import full_model_bytes, load_checkpoint, save_checkpoint
from p2pfed.device.exchange import Forwarding
from p2pfed.engine.allocator import freed_memory_kept
from p2pfed.engine.churn import churn_intervals
from p2pfed.engine.collector import fewer_collections
from p2pfed.network.contacts import ContactPlan
from p2pfed.device.energy import EnergyMeter
from p2pfed.engine.opportunistic import AsyncSchedule, OpportunisticSimulation
from p2pfed.engine.footprint import check_memory, expected_degree, resolve_device
from p2pfed.engine.runtime import Runtime
from p2pfed.engine.partition import partition_graph
from p2pfed.engine.sharded import ShardedRounds, dask_shards
from p2pfed.engine.simulation import Simulation
from p2pfed.engine.rounds_build import round_schedule, rounds_extra, rounds_simulation, signing_of
from p2pfed.engine.offload import make_offload
from p2pfed.results.callbacks import Callback, Rows
from p2pfed.results.files import write_run
from p2pfed.results.recorder import Recorder, round_float
from p2pfed.results.attack_success import device_view
from p2pfed.results.summary import adversaries_summary, build_summary
from p2pfed.scenario.build import adversary_map, build_algorithms, build_class_schedule, build_device_model
from p2pfed.scenario.loader import dump, fingerprint
from p2pfed.scenario.spec import RunSpec
from p2pfed.scenario.randomness import int_seed, stream
from p2pfed.scenario.threads import apply_torch_threads, offload_helper_wanted

CHECKPOINT_KIND = "simulation"
CONTACTS_CHECKPOINT_KIND = "contact-simulation"
SHARDED_CHECKPOINT_KIND = "sharded-simulation"


@dataclass(frozen=True)
class Checkpointing:
    """Where a run keeps its checkpoint, how often it writes one (every ``every`` rounds, or over
    contacts every ``every`` evaluations), and whether it stops early (after ``stop_after_round``
    rounds or evaluations, to be continued by a later run)."""

    path: Path
    every: int = 1
    stop_after_round: int | None = None


@dataclass(frozen=True)
class Simulated:
    """What a simulation produced: its summary and recorder (the rows of its results files), the
    devices' names, the federation's account (``dataset.json``), over contacts its plan, and
    with ``devices`` its energy account."""

    summary: dict[str, Any]
    recorder: Recorder
    names: list[str]
    dataset: dict[str, Any]
    plan: ContactPlan | None
    energy: EnergyMeter | None = None
    resumed_at_end: bool = False     # resumed from a checkpoint taken at the run's end
    graph: Any = None                # the rounds' topology (networkx), for edges.csv


def run_scenario(loaded: RunSpec, out_dir: Path | None = None, *, progress: bool = True,
                 checkpointing: Checkpointing | None = None,
                 callbacks: Sequence[Callback] = ()) -> dict[str, Any] | None:
    """Simulate the scenario; write the results files to ``out_dir`` if given; return the summary.

    With ``checkpointing``, a synchronous run resumes from its checkpoint file if there is one,
    writes it every ``every`` rounds, and returns None if it stopped before the last round.
    ``callbacks`` hear each evaluation as it completes, and the summary."""
    done = simulate(loaded, progress=progress, checkpointing=checkpointing, callbacks=callbacks)
    if done is None:
        return None
    if out_dir is not None:
        write_results(done, Path(out_dir), loaded.scenario.name)
    return done.summary


def write_results(done: Simulated, out_dir: Path, name: str) -> None:
    """A simulation's results files, its graph as data (``edges.csv`` or ``contacts.csv``) and,
    over contacts, its contact-graph snapshots."""
    from p2pfed.results.graph_files import write_contacts, write_edges

    meter = done.energy
    write_run(out_dir, done.summary, done.recorder, done.names, dataset=done.dataset,
              round_columns=None if meter is None else {row["round"]: meter.round_columns(row["round"] - 1)
                                                         for row in done.recorder.rows},
              device_columns=None if meter is None else [meter.device_columns(i) for i in range(len(done.names))])
    if done.graph is not None:
        write_edges(out_dir, done.graph)
    if done.plan is not None:
        write_contacts(out_dir, done.plan)
        from p2pfed.results.plots import plot_contacts
        sim_time = float(done.summary["sim_time_s"])
        plot_contacts(done.plan, [round(sim_time * f) for f in (0.25, 0.5, 0.75)],
                      out_dir / "contacts.png", title=f"{name}: contact graph snapshots")


def simulate(loaded: RunSpec, *, progress: bool = True, checkpointing: Checkpointing | None = None,
             callbacks: Sequence[Callback] = ()) -> Simulated | None:
    """``run_scenario`` without writing files (None: stopped early at a checkpoint), with the
    garbage collector's young generation enlarged (``collector``) and freed memory kept for
    reuse until the end (``allocator``)."""
    with fewer_collections(), freed_memory_kept():
        return _simulate(loaded, progress=progress, checkpointing=checkpointing, callbacks=callbacks)


def _simulate(loaded: RunSpec, *, progress: bool, checkpointing: Checkpointing | None,
              callbacks: Sequence[Callback]) -> Simulated | None:
    sc = loaded.scenario
    if sc.engine.shards > 1:
        return simulate_sharded(loaded, progress=progress, checkpointing=checkpointing, callbacks=callbacks)
    apply_torch_threads(sc.engine.torch_threads, batched=sc.contacts.kind == "none")
    resolve_device(sc.engine.device, loaded.source)
    wall_start = time.perf_counter()
    dataset = loaded.federation
    n = len(dataset.devices)
    if expected_degree(loaded, n) is not None:
        check_memory(loaded, dataset)   # before a graph that may itself not fit
    graph = loaded.graph if sc.contacts.kind in ("none", "static") else None
    if expected_degree(loaded, n) is None:
        check_memory(loaded, dataset, graph)
    helper = sc.uses_batch_windows() and offload_helper_wanted(sc.engine.offload)
    offload = make_offload(helper=helper, batched=sc.engine.batched_training)
    algorithms = build_algorithms(loaded, offload=offload)
    recorder = Recorder(n)
    energy_plan = loaded.energy_plan
    meter = None if energy_plan is None else EnergyMeter(energy_plan, recorder)
    rows = Rows(callbacks)
    shown = Progress(loaded, recorder, rows, progress)
    runtime: Runtime
    plan = None
    try:
        if sc.contacts.kind == "none":
            runtime, summarise = _rounds_runtime(loaded, algorithms, recorder, shown, meter)
            kind = CHECKPOINT_KIND
        else:
            runtime, summarise = _contacts_runtime(loaded, algorithms, recorder, shown, checkpointing, meter)
            kind, plan = CONTACTS_CHECKPOINT_KIND, runtime.plan
        at_end = _drive(runtime, kind, loaded, checkpointing, shown)
    finally:
        offload.close()
    if at_end is None:
        return None
    sim_time, extra = runtime.now(), summarise()
    if meter is not None:
        extra["energy"] = meter.summary(sim_time)
    if helper:
        extra["offload"] = offload.stats()
    if loaded.swapped is not None:
        extra["swapped"] = loaded.swapped.to_dict()
    if sc.adversaries:
        extra["adversaries"] = adversaries_summary(recorder, adversary_map(loaded, n, dataset.num_classes),
                                                   {a.ctx.device_id: device_view(a) for a in algorithms})
    summary = build_summary(dump(loaded), loaded.source, recorder, [a.stats() for a in algorithms],
                            devices=n, sim_time_s=sim_time, wall_time_s=time.perf_counter() - wall_start,
                            full_model_bytes=full_model_bytes(algorithms[0].ctx.model, sc.engine.precision),
                            **extra)
    rows.emit(recorder.rows)
    rows.end(summary)
    return Simulated(summary, recorder, [d.name for d in dataset.devices], dataset.describe(), plan, meter,
                     resumed_at_end=at_end, graph=graph if plan is None else None)


def simulate_sharded(loaded: RunSpec, *, progress: bool = True, checkpointing: Checkpointing | None = None,
                     callbacks: Sequence[Callback] = (),
                     shards: Callable[[RunSpec, list[list[int]]], AbstractContextManager[list[Any]]] = dask_shards,
                     ) -> Simulated | None:
    """``simulate`` with its devices split over ``engine.shards`` processes: ``shards`` builds
    them over the partition (Dask actors; ``local_shards`` in this process)."""
    sc = loaded.scenario
    wall_start = time.perf_counter()
    dataset, graph = loaded.federation, loaded.graph
    n = len(dataset.devices)
    parts = partition_graph(graph, sc.engine.shards, seed=int_seed(sc.seed, "shards") % 2**32)
    recorder = Recorder(n)
    rows = Rows(callbacks)
    shown = Progress(loaded, recorder, rows, progress)
    with shards(loaded, parts) as built:
        runtime = ShardedRounds(built, parts, loaded, recorder, on_round=lambda r: shown.tick(r + 1, False),
                                checkpoint=None if checkpointing is None else checkpointing.path)
        at_end = _drive(runtime, SHARDED_CHECKPOINT_KIND, loaded, checkpointing, shown)
        if at_end is None:
            return None
        stats, views = runtime.device_results(bool(sc.adversaries))
        extra = {**rounds_extra(loaded, build_class_schedule(loaded)), "sharding": runtime.crossing_summary()}
    if loaded.swapped is not None:
        extra["swapped"] = loaded.swapped.to_dict()
    if sc.adversaries:
        extra["adversaries"] = adversaries_summary(recorder, adversary_map(loaded, n, dataset.num_classes), views)
    model = build_device_model(loaded, dataset.num_features, dataset.num_classes)
    summary = build_summary(dump(loaded), loaded.source, recorder, stats, devices=n, sim_time_s=runtime.now(),
                            wall_time_s=time.perf_counter() - wall_start,
                            full_model_bytes=full_model_bytes(model, sc.engine.precision), **extra)
    rows.emit(recorder.rows)
    rows.end(summary)
    return Simulated(summary, recorder, [d.name for d in dataset.devices], dataset.describe(), None,
                     resumed_at_end=at_end, graph=graph)


def _check_windows(loaded: RunSpec, schedule: AsyncSchedule, checkpointing: Checkpointing | None) -> None:
    """A contact run checkpoints at evaluations, where no batch window may be open."""
    w, every = schedule.batch_window_s, schedule.eval_every_s
    if checkpointing is not None and w and abs(every / w - round(every / w)) > 1e-9:
        raise ValueError(f"{loaded.source}: evaluation.every_s ({every:g} s) must be a multiple of "
                         f"asynchronous.batch_window_s ({w:g} s) for checkpoints over contacts")


class Progress:
    """The progress bar and the live callbacks, told after each round or evaluation."""

    def __init__(self, loaded: RunSpec, recorder: Recorder, rows: Rows, show: bool) -> None:
        self.recorder = recorder
        self.rows = rows
        self.name = loaded.scenario.algorithm.name
        self.show = show
        self.bar: tqdm | None = None

    def open(self, length: int, unit: str) -> None:
        self.bar = tqdm(total=length, desc=self.name, unit=unit, disable=not self.show, leave=False)

    def tick(self, position: int, new_rows: bool = True) -> None:
        """The run is at ``position`` (in the bar's unit); ``new_rows``: an evaluation completed."""
        assert self.bar is not None
        self.bar.update(position - self.bar.n)
        if self.recorder.latest:
            self.bar.set_postfix(f1=f"{self.recorder.latest['f1_macro_mean']:.3f}")
        if new_rows and self.rows.callbacks:
            self.rows.emit(self.recorder.rows)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _drive(runtime: Runtime, kind: str, loaded: RunSpec, checkpointing: Checkpointing | None,
           progress: Progress) -> bool | None:
    """Run ``runtime`` to its end, or with ``checkpointing`` from its checkpoint if there is one,
    saving one every ``every`` steps; None: stopped early; else whether the checkpoint it
    resumed from was already at the run's end."""
    mark = fingerprint(loaded)
    progress.open(runtime.length, runtime.unit)
    at_end = False
    try:
        if checkpointing is not None and checkpointing.path.exists():
            runtime.load_state_dict(load_checkpoint(checkpointing.path, kind, mark))
            progress.tick(runtime.position(), new_rows=False)
            at_end = runtime.done >= runtime.total
        else:
            runtime.start()
        stop = runtime.total
        if checkpointing is not None and checkpointing.stop_after_round is not None:
            stop = min(stop, checkpointing.stop_after_round)
        while runtime.done < stop:
            step = stop if checkpointing is None else runtime.done + checkpointing.every
            runtime.advance(min(step, stop))
            if checkpointing is not None:
                save_checkpoint(checkpointing.path, kind, mark, runtime.state_dict())
    finally:
        runtime.close()
        progress.close()
    return None if runtime.done < runtime.total else at_end


def _rounds_runtime(loaded: RunSpec, algorithms: list[Algorithm], recorder: Recorder, progress: Progress,
                    meter: EnergyMeter | None) -> tuple[Simulation, Callable[[], dict[str, Any]]]:
    """The synchronous runtime, and what it adds to the summary once done."""
    class_schedule = build_class_schedule(loaded)
    schedule = round_schedule(loaded.scenario)
    sim = rounds_simulation(loaded, algorithms, recorder, class_schedule=class_schedule, meter=meter,
                            on_round=lambda r, now: progress.tick(r + 1, schedule.evaluates(r)))
    return sim, lambda: rounds_extra(loaded, class_schedule)


def _contacts_runtime(loaded: RunSpec, algorithms: list[Algorithm],
                      recorder: Recorder, progress: Progress, checkpointing: Checkpointing | None,
                      meter: EnergyMeter | None) -> tuple[OpportunisticSimulation, Callable[[], dict[str, Any]]]:
    """The opportunistic runtime, and what it adds to the summary once done."""
    sc = loaded.scenario
    n = len(algorithms)
    c, a, fw, churn = sc.contacts, sc.asynchronous, sc.forwarding, sc.churn
    plan, duration = loaded.contacts
    schedule = AsyncSchedule(duration_s=duration, train_period_s=a.train_period_s,
                             train_jitter_s=a.train_jitter_s,
                             eval_every_s=sc.evaluation.every_s or duration / 20,
                             send_policy=a.send_policy, max_age_s=a.max_age_s, loss_rate=c.loss_rate,
                             batch_window_s=a.batch_window_s, protocol=c.protocol)
    _check_windows(loaded, schedule, checkpointing)   # before anything is opened
    forwarding = Forwarding(hop_limit=fw.hop_limit if fw.enabled else 1, parts=tuple(fw.parts),
                            buffer_items=fw.buffer_items)
    offline = []
    if churn.mean_online_s is not None:
        assert churn.mean_offline_s is not None   # the schema sets both or neither
        offline = churn_intervals(n, duration, churn.mean_online_s, churn.mean_offline_s,
                                  stream(sc.seed, "churn"))
    sim = OpportunisticSimulation(algorithms, plan, schedule, recorder, stream(sc.seed, "device-clocks"),
                                  max_message_bytes=sc.engine.max_message_bytes, forwarding=forwarding,
                                  offline=offline, on_time=lambda now: progress.tick(round(now)),
                                  batched=sc.engine.batched_training, precision=sc.engine.precision, energy=meter,
                                  signing=signing_of(sc, n))

    def extra() -> dict[str, Any]:
        stats = sim.stats()
        return {"rounds": stats["trainings_per_device"],
                "contacts": {"kind": c.kind, **{k: round_float(v, 4) for k, v in plan.stats(duration).items()}},
                "asynchronous": {k: None if v is None else round_float(v, 4) for k, v in stats.items()},
                "contact_protocol": {"protocol": c.protocol, **sim.control}}
    return sim, extra
