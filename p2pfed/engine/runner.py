"""Run one scenario in the simulator and produce its results (the ``p2pfed run`` job).

Without a ``contacts`` section (``contacts.kind: none``) devices run synchronous rounds over the
static ``topology`` graph; any other contact kind runs the opportunistic runtime.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from p2pfed.algorithms import Algorithm
from p2pfed.algorithms.model_payload import model_payload
from p2pfed.engine.churn import churn_intervals
from p2pfed.engine.contacts import ContactPlan, build_contact_plan
from p2pfed.engine.opportunistic import AsyncSchedule, Forwarding, OpportunisticSimulation
from p2pfed.engine.simulation import RoundSchedule, Simulation
from p2pfed.results.files import write_run
from p2pfed.results.recorder import Recorder, round_float
from p2pfed.results.summary import build_summary
from p2pfed.scenario.build import (build_algorithms, build_class_schedule, build_graph,
                                  load_scenario_dataset)
from p2pfed.scenario.loader import LoadedScenario
from p2pfed.transport import Message, encode


def full_model_bytes(model: torch.nn.Module) -> int:
    """Encoded size of one whole-model message: the yardstick for communication ratios."""
    p = model_payload(model, 0)
    return len(encode(Message(kind="gossip/model", sender=0, round=0, sent_at=0.0,
                              meta=p.meta, tensors=p.tensors)))


def run_scenario(loaded: LoadedScenario, out_dir: Path | None = None, *,
                 progress: bool = True) -> dict[str, Any]:
    """Simulate the scenario; write the results files to ``out_dir`` if given; return the summary."""
    sc = loaded.scenario
    torch.set_num_threads(sc.engine.torch_threads)
    wall_start = time.perf_counter()
    dataset = load_scenario_dataset(loaded)
    n = len(dataset.devices)
    graph = build_graph(loaded, n) if sc.contacts.kind in ("none", "static") else None
    algorithms = build_algorithms(loaded, dataset)
    class_schedule = build_class_schedule(loaded, dataset)
    if class_schedule is not None and sc.contacts.kind != "none":
        raise ValueError("dynamic.devices_fraction needs synchronous rounds (contacts.kind: none): "
                         "classes return on a round schedule")
    recorder = Recorder(n)
    rng = np.random.default_rng(np.random.SeedSequence(sc.seed).spawn(n + 1)[-1])
    plan = None
    if sc.contacts.kind == "none":
        sim_time, extra = _run_rounds(loaded, algorithms, graph, recorder, rng, progress, class_schedule)
    else:
        sim_time, extra, plan = _run_contacts(loaded, algorithms, graph, recorder, rng, progress)
    summary = build_summary(loaded, recorder, algorithms, devices=n, sim_time_s=sim_time,
                            wall_time_s=time.perf_counter() - wall_start,
                            full_model_bytes=full_model_bytes(algorithms[0].ctx.model), **extra)
    if out_dir is not None:
        write_run(Path(out_dir), summary, recorder, [d.name for d in dataset.devices])
        if plan is not None:
            from p2pfed.results.plots import plot_contacts
            plot_contacts(plan, [round(sim_time * f) for f in (0.25, 0.5, 0.75)],
                          Path(out_dir) / "contacts.png", title=f"{sc.name}: contact graph snapshots")
    return summary


def _run_rounds(loaded: LoadedScenario, algorithms: list[Algorithm], graph, recorder: Recorder,
                rng: np.random.Generator, progress: bool, class_schedule) -> tuple[float, dict[str, Any]]:
    sc = loaded.scenario
    n = len(algorithms)
    schedule = RoundSchedule(rounds=sc.rounds, round_period_s=sc.engine.round_period_s,
                             participation=sc.engine.participation, eval_every=sc.evaluation.every)
    bar = tqdm(total=sc.rounds, desc=f"{sc.algorithm.name}", unit="round", disable=not progress,
               leave=False)

    def on_round(r: int, now: float) -> None:
        bar.update(1)
        if recorder.latest:
            bar.set_postfix(f1=f"{recorder.latest['f1_macro_mean']:.3f}")

    sim = Simulation(algorithms, graph, schedule, recorder, rng,
                     max_message_bytes=sc.engine.max_message_bytes, on_round=on_round,
                     class_schedule=class_schedule)
    try:
        sim_time = sim.run()
    finally:
        bar.close()
    extra = {} if class_schedule is None else {"dynamic": {
        "devices_changed": sorted(class_schedule.removed),
        "classes_hidden_at_start": sum(len(v) for v in class_schedule.removed.values()),
        "return_rounds": [r + 1 for r in class_schedule.return_rounds(sc.rounds)]}}
    return sim_time, {"topology": {"nodes": graph.number_of_nodes(), "edges": graph.number_of_edges(),
                                   "mean_degree": round_float(2 * graph.number_of_edges() / max(n, 1))},
                      **extra}


def _run_contacts(loaded: LoadedScenario, algorithms: list[Algorithm], graph, recorder: Recorder,
                  rng: np.random.Generator, progress: bool) -> tuple[float, dict[str, Any], ContactPlan]:
    sc = loaded.scenario
    n = len(algorithms)
    c, a, fw, churn = sc.contacts, sc.asynchronous, sc.forwarding, sc.churn
    plan, duration = build_contact_plan(c, n, seed=sc.seed, graph=graph, file=loaded.resolve(c.file))
    schedule = AsyncSchedule(duration_s=duration, train_period_s=a.train_period_s,
                             train_jitter_s=a.train_jitter_s,
                             eval_every_s=sc.evaluation.every_s or duration / 20,
                             send_policy=a.send_policy, max_age_s=a.max_age_s, loss_rate=c.loss_rate)
    forwarding = Forwarding(hop_limit=fw.hop_limit if fw.enabled else 1, parts=tuple(fw.parts),
                            buffer_items=fw.buffer_items)
    offline = []
    if churn.mean_online_s is not None:
        churn_rng = np.random.default_rng(np.random.SeedSequence([sc.seed, 0xC4C4]))
        offline = churn_intervals(n, duration, churn.mean_online_s, churn.mean_offline_s, churn_rng)
    bar = tqdm(total=round(duration), desc=f"{sc.algorithm.name}", unit="sim s", disable=not progress,
               leave=False)

    def on_time(now: float) -> None:
        bar.update(round(now) - bar.n)
        if recorder.latest:
            bar.set_postfix(f1=f"{recorder.latest['f1_macro_mean']:.3f}")

    sim = OpportunisticSimulation(algorithms, plan, schedule, recorder, rng,
                                  max_message_bytes=sc.engine.max_message_bytes, forwarding=forwarding,
                                  offline=offline, on_time=on_time)
    try:
        sim_time = sim.run()
    finally:
        bar.close()
    stats = sim.stats()
    return sim_time, {
        "rounds": stats["trainings_per_device"],
        "contacts": {"kind": c.kind, **{k: round_float(v, 4) for k, v in plan.stats(duration).items()}},
        "asynchronous": {k: None if v is None else round_float(v, 4) for k, v in stats.items()},
    }, plan
