"""Run one scenario in the simulator and produce its results (the ``p2pfed run`` job)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from p2pfed.algorithms.model_payload import model_payload
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
    graph = build_graph(loaded, n)
    algorithms = build_algorithms(loaded, dataset)
    class_schedule = build_class_schedule(loaded, dataset)
    recorder = Recorder(n)
    schedule = RoundSchedule(rounds=sc.rounds, round_period_s=sc.engine.round_period_s,
                             participation=sc.engine.participation, eval_every=sc.evaluation.every)
    bar = tqdm(total=sc.rounds, desc=f"{sc.algorithm.name}", unit="round", disable=not progress,
               leave=False)

    def on_round(r: int, now: float) -> None:
        bar.update(1)
        if recorder.latest:
            bar.set_postfix(f1=f"{recorder.latest['f1_macro_mean']:.3f}")

    sim = Simulation(algorithms, graph, schedule, recorder,
                     np.random.default_rng(np.random.SeedSequence(sc.seed).spawn(n + 1)[-1]),
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
    summary = build_summary(loaded, recorder, algorithms, devices=n, sim_time_s=sim_time,
                            wall_time_s=time.perf_counter() - wall_start,
                            full_model_bytes=full_model_bytes(algorithms[0].ctx.model),
                            topology={"nodes": graph.number_of_nodes(), "edges": graph.number_of_edges(),
                                      "mean_degree": round_float(2 * graph.number_of_edges() / max(n, 1))},
                            **extra)
    if out_dir is not None:
        write_run(Path(out_dir), summary, recorder, [d.name for d in dataset.devices])
    return summary
