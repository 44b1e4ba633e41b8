"""The synchronous runtime built from a run spec, the same way for one process and for each shard
of a run split over several (``p2pfed.engine.shard``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from p2pfed.algorithms import Algorithm
from p2pfed.data.dynamic import ClassSchedule
from p2pfed.device.energy import EnergyMeter
from p2pfed.engine.simulation import RoundSchedule, Simulation
from p2pfed.results.recorder import Recorder, round_float
from p2pfed.scenario.randomness import stream
from p2pfed.scenario.schema import Scenario
from p2pfed.scenario.spec import RunSpec
from p2pfed.transport.signing import Signing


def round_schedule(sc: Scenario) -> RoundSchedule:
    """The scenario's rounds: how many, how long, who takes part and when devices are scored."""
    return RoundSchedule(rounds=sc.rounds, round_period_s=sc.engine.round_period_s,
                         participation=sc.engine.participation, eval_every=sc.evaluation.every,
                         eval_when=sc.evaluation.when, eval_both=sc.evaluation.both)


def signing_of(sc: Scenario, n: int) -> Signing | None:
    """The devices' signing keys (``security.sign_artifacts``), derived from the run's seed."""
    return Signing.simulated(sc.seed, n) if sc.security.sign_artifacts else None


def rounds_simulation(loaded: RunSpec, algorithms: list[Algorithm], recorder: Recorder, *,
                      class_schedule: ClassSchedule | None, meter: EnergyMeter | None = None,
                      on_round: Callable[[int, float], None] | None = None,
                      devices: Sequence[int] | None = None,
                      cls: type[Simulation] = Simulation) -> Simulation:
    """``cls`` (the synchronous runtime, or a shard of it) over the spec's graph; ``devices``: the
    ids of ``algorithms`` where they are not all the federation's devices."""
    sc, graph = loaded.scenario, loaded.graph
    return cls(algorithms, graph, round_schedule(sc), recorder, stream(sc.seed, "participation"),
               max_message_bytes=sc.engine.max_message_bytes, on_round=on_round, class_schedule=class_schedule,
               batched_training=sc.engine.batched_training, precision=sc.engine.precision, energy=meter,
               setup_round_trips=sc.topology.setup_round_trips, framing=sc.topology.framing,
               slow_start=sc.topology.slow_start, signing=signing_of(sc, graph.number_of_nodes()),
               devices=devices)


def rounds_extra(loaded: RunSpec, class_schedule: ClassSchedule | None) -> dict[str, Any]:
    """What a run of synchronous rounds adds to its summary: its topology and dynamic data."""
    sc, graph = loaded.scenario, loaded.graph
    n = graph.number_of_nodes()
    dynamic = {} if class_schedule is None else {"dynamic": {
        "devices_changed": sorted(class_schedule.removed),
        "classes_hidden_at_start": sum(len(v) for v in class_schedule.removed.values()),
        "return_rounds": [r + 1 for r in class_schedule.return_rounds(sc.rounds)]}}
    return {"topology": {"nodes": n, "edges": graph.number_of_edges(),
                         "mean_degree": round_float(2 * graph.number_of_edges() / max(n, 1))},
            **dynamic}
