"""Real peers' results in the simulator's files: per-peer histories → one Recorder → rounds.csv etc.

Each peer keeps a history (one entry per evaluated round: metrics plus its cumulative counters)
and writes it to ``peer.json``. Merging replays those entries through the same ``Recorder`` the
simulator uses, so ``rounds.csv`` / ``summary.json`` / ``plot.png`` mean the same thing. A single
peer's own results are the merge of one history.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from p2pfed.learning.training import Evaluation
from p2pfed.results.files import device_rows, write_results_files
from p2pfed.results.recorder import DeviceCounters, Recorder, round_float
from p2pfed.results.summary import build_summary
from p2pfed.scenario.loader import LoadedScenario


class _Stats:
    """Stands in for an Algorithm in ``build_summary``: the stats a peer reported."""

    def __init__(self, stats: dict[str, Any]) -> None:
        self._stats = stats

    def stats(self) -> dict[str, Any]:
        return self._stats


def merge(peers: list[dict[str, Any]], start_time: float) -> Recorder:
    """One Recorder from the ``peer.json`` contents of several peers (in device order)."""
    recorder = Recorder(len(peers))
    by_round: dict[int, dict[int, dict]] = {}
    for i, peer in enumerate(peers):
        for entry in peer["history"]:
            by_round.setdefault(entry["round"], {})[i] = entry
    previous: Counter = Counter()
    for rnd in sorted(by_round):
        entries = by_round[rnd]
        for i, entry in entries.items():
            recorder.devices[i] = DeviceCounters(**entry["counters"])
        # Each peer's counters are running totals; the traffic of rounds (previous, rnd] is the
        # difference, credited to round rnd like the simulator's per-round tallies.
        now = Counter(recorder.counters())
        delta = Counter({k: now[k] - previous[k] for k in now})
        recorder.traffic(rnd - 1).update(delta)
        previous = now
        recorder.evaluation(rnd - 1, max(e["time"] for e in entries.values()) - start_time,
                            [Evaluation(e["f1_macro"], e["loss"], e["accuracy"])
                             for _, e in sorted(entries.items())])
    recorder.devices = [DeviceCounters(**p["counters"]) for p in peers]
    recorder.last_evaluations = [Evaluation(p["history"][-1]["f1_macro"], p["history"][-1]["loss"],
                                            p["history"][-1]["accuracy"]) if p["history"]
                                 else Evaluation(float("nan"), float("nan"), float("nan")) for p in peers]
    for p in peers:
        recorder.drop_reasons.update(p["drop_reasons"])
    return recorder


def write_results(out_dir: Path, loaded: LoadedScenario, peers: list[dict[str, Any]], *,
                  start_time: float, wall_time_s: float, full_model_bytes: int,
                  **extra: Any) -> dict[str, Any]:
    """rounds.csv, devices.csv, summary.json and plot.png for these peers; returns the summary."""
    recorder = merge(peers, start_time)
    elapsed = max((p["history"][-1]["time"] for p in peers if p["history"]), default=start_time)
    summary = build_summary(loaded, recorder, [_Stats(p["stats"]) for p in peers], devices=len(peers),
                            sim_time_s=elapsed - start_time, wall_time_s=wall_time_s,
                            full_model_bytes=full_model_bytes, **extra)
    rows = device_rows(recorder, [p["name"] for p in peers])
    for row, peer in zip(rows, peers):
        row["device"] = peer["id"]
    write_results_files(out_dir, summary, recorder.rows, rows,
                        title=f"{summary['scenario']} — {summary['algorithm']} (peers)")
    return summary


def round_entry(round: int, time: float, evaluation: Evaluation, counters: DeviceCounters) -> dict:
    """One history entry: the round (1-based, as in rounds.csv), when, metrics, counters so far."""
    return {"round": round, "time": time, "f1_macro": round_float(evaluation.f1_macro),
            "loss": round_float(evaluation.loss), "accuracy": round_float(evaluation.accuracy),
            "counters": dict(vars(counters))}
