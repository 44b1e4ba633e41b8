"""Real peers' results in the simulator's files: each peer's Recorder → one Recorder → rounds.csv etc.

Each peer feeds its own Recorder live, like a simulated device, and writes its state to
``peer.json``. Merging the peers' recorders gives the Recorder a simulation of the same devices
would have filled, so ``rounds.csv`` / ``summary.json`` / ``plot.png`` mean the same thing. A
single peer's own results are the merge of one recorder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from p2pfed.energy import EnergyPlan
from p2pfed.device.energy import EnergyMeter
from p2pfed.results.files import write_run
from p2pfed.results.recorder import Recorder
from p2pfed.results.summary import adversaries_summary, build_summary
from p2pfed.scenario.build import adversary_map
from p2pfed.scenario.loader import dump
from p2pfed.scenario.spec import RunSpec


def merge(peers: list[dict[str, Any]]) -> Recorder:
    """One Recorder from the ``peer.json`` contents of several peers (in device order)."""
    return Recorder.merge([Recorder.from_state(p["recorder"]) for p in peers])


def merged_energy(loaded: RunSpec, peers: list[dict[str, Any]], recorder: Recorder,
                  end_s: float) -> EnergyMeter | None:
    """The peers' energy accounts as one (None where the scenario has no ``devices``): each peer's
    own device, idle power and tails counted to ``end_s`` (the run's wall time)."""
    if not peers or any(p.get("energy") is None for p in peers):   # no devices section: no dataset load
        return None
    plan = loaded.energy_plan
    if plan is None:
        return None
    profiles = None if plan.profiles is None else tuple(plan.profiles[p["id"]] for p in peers)
    meter = EnergyMeter(EnergyPlan(len(peers), profiles, plan.radio, (None,) * len(peers)), recorder)
    meter.load_state_dict(EnergyMeter.merge_states([p["energy"] for p in peers]))
    meter.clock = lambda: end_s
    return meter


def _quantiles(values: list[float]) -> dict[str, float | int | None]:
    """Count, median and 95th percentile of a list (None when empty)."""
    if not values:
        return {"count": 0, "median": None, "p95": None}
    return {"count": len(values), "median": round(float(np.median(values)), 4),
            "p95": round(float(np.percentile(values, 95)), 4)}


def write_results(out_dir: Path, loaded: RunSpec, peers: list[dict[str, Any]], *,
                  wall_time_s: float, full_model_bytes: int, **extra: Any) -> dict[str, Any]:
    """rounds.csv, devices.csv, summary.json and plot.png for these peers; returns the summary."""
    recorder = merge(peers)
    rows = recorder.rows
    if any("contact_protocol" in p for p in peers):   # over contacts, as the simulator reports it
        n = max(len(peers), 1)
        extra.setdefault("rounds", sum(p["trainings"] for p in peers) / n)
        extra.setdefault("asynchronous", {"trainings_per_device": sum(p["trainings"] for p in peers) / n,
                                          "fusions_per_device": sum(p["fusions"] for p in peers) / n,
                                          "mean_fused_age_s": recorder.mean_fused_age_s})
        runtime = extra.setdefault("runtime", {})
        runtime["contact_protocol"] = {k: sum(p["contact_protocol"][k] for p in peers)
                                       for k in peers[0]["contact_protocol"]}
        runtime["contact_timing"] = {k: _quantiles([x for p in peers for x in p["contact_timing"][k]])
                                     for k in peers[0]["contact_timing"]}
    end_s = rows[-1]["sim_time_s"] if rows else 0.0
    meter = merged_energy(loaded, peers, recorder, end_s)
    if meter is not None:
        extra["energy"] = meter.summary(end_s)
        # The last row is the whole run, as the simulator's: a neighbour's last message may
        # arrive after a peer's own last snapshot.
        if rows:
            meter.snapshot(rows[-1]["round"] - 1)
    if loaded.swapped is not None:
        extra["swapped"] = loaded.swapped.to_dict()
    if loaded.scenario.adversaries:   # the peers' own verdicts are not trusted: the scenario says who lied
        attacks = adversary_map(loaded, loaded.num_devices, loaded.federation.num_classes)
        views = {p["id"]: p["attack_view"] for p in peers if p.get("attack_view") is not None}
        extra["adversaries"] = adversaries_summary(recorder, attacks, views)
    summary = build_summary(dump(loaded), loaded.source, recorder, [p["stats"] for p in peers],
                            devices=len(peers), sim_time_s=end_s,
                            wall_time_s=wall_time_s, full_model_bytes=full_model_bytes, **extra)
    dataset = {"devices": len(peers), "class_counts": {p["name"]: p["class_counts"] for p in peers
                                                       if "class_counts" in p}}
    write_run(out_dir, summary, recorder, [p["name"] for p in peers], title_suffix=" (peers)", dataset=dataset,
              round_columns=None if meter is None else {row["round"]: meter.round_columns(row["round"] - 1)
                                                         for row in rows},
              device_columns=None if meter is None else [meter.device_columns(i) for i in range(len(peers))])
    return summary
