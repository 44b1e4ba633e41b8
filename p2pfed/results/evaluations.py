"""Every device's evaluation scores, round by round, and the rounds.csv metric columns they give.

Three tables per round: the scores under the run's own protocol (with the round's latest
evaluation time), the scores under each named protocol (right after the fusion, or after local
training), and each device's macro-F1 on the other devices' pooled test data (generalization).
The Recorder keeps one of these beside its traffic counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from p2pfed.learning.training import Evaluation

METRICS = ("f1_macro", "loss", "accuracy", "f1_present")
GENERALIZATION_COLUMNS = ("generalization_f1_mean", "generalization_f1_std")
# Where in its round a device was scored: right after the fusion, or after its local training.
PROTOCOLS = ("after-fusion", "after-training")


def protocol_columns(protocol: str) -> tuple[str, str]:
    """The rounds.csv / summary.json columns of one protocol: its mean macro-F1 and accuracy."""
    key = protocol.replace("-", "_")
    return f"f1_{key}_mean", f"accuracy_{key}_mean"


def round_float(x: float, digits: int = 6) -> float:
    """Round for stable, readable output files."""
    return float(round(float(x), digits))


def _row(evaluation: Evaluation) -> tuple[float, ...]:
    return tuple(float(getattr(evaluation, m)) for m in METRICS)


def _table(rows: list, width: int = len(METRICS)) -> np.ndarray:
    """A saved evaluation table (None as NaN); rows saved before a metric existed get NaN for it."""
    out = np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float).reshape(len(rows), -1)
    return np.pad(out, ((0, 0), (0, width - out.shape[1])), constant_values=np.nan)


def _nanmean(values: np.ndarray) -> float:
    return float(np.nanmean(values)) if not np.isnan(values).all() else float("nan")


def _saved(table: np.ndarray) -> list[list[float | None]]:
    return [[None if np.isnan(v) else float(v) for v in row] for row in table]


class EvaluationTables:
    """Per round, a (devices, METRICS) table under the run's protocol and under each named one,
    the round's latest evaluation time, and a (devices,) generalization row. ``device_ids``: the
    devices recorded, in table order."""

    def __init__(self, device_ids: Sequence[int]) -> None:
        self.device_ids = list(device_ids)
        self.index = {d: i for i, d in enumerate(self.device_ids)}
        self.primary: dict[int, np.ndarray] = {}                     # round -> (devices, METRICS)
        self.by_protocol: dict[str, dict[int, np.ndarray]] = {}      # protocol -> round -> (devices, METRICS)
        self.time: dict[int, float] = {}                             # round -> latest evaluation time
        self.general: dict[int, np.ndarray] = {}                     # round -> (devices,) macro-F1

    def evaluated(self, device: int, round: int, time_s: float, evaluation: Evaluation, *,
                  protocol: str | None, primary: bool) -> None:
        """Store one score (``time_s`` already relative to the run's start); see ``Recorder.evaluated``."""
        if protocol is not None:
            if protocol not in PROTOCOLS:
                raise ValueError(f"evaluation protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
            self._store(self.by_protocol.setdefault(protocol, {}), device, round, evaluation)
        if primary:
            self._store(self.primary, device, round, evaluation)
            self.time[round] = max(self.time.get(round, -np.inf), time_s)

    def _store(self, tables: dict[int, np.ndarray], device: int, round: int, evaluation: Evaluation) -> None:
        table = tables.get(round)
        if table is None:
            table = tables[round] = np.full((len(self.device_ids), len(METRICS)), np.nan)
        table[self.index[device]] = _row(evaluation)

    def generalized(self, device: int, round: int, f1_macro: float) -> None:
        """``device``'s model scored ``f1_macro`` on the other devices' pooled test data after ``round``."""
        row = self.general.setdefault(round, np.full(len(self.device_ids), np.nan))
        row[self.index[device]] = f1_macro

    # -- reading -----------------------------------------------------------------------------
    def metrics_row(self, round: int) -> dict[str, Any]:
        """The rounds.csv metric columns of an evaluated round (1-based ``round`` column)."""
        values = self.primary[round]
        return {
            "round": round + 1,
            "sim_time_s": round_float(self.time[round]),
            "f1_macro_mean": round_float(np.nanmean(values[:, 0])),
            "f1_macro_std": round_float(np.nanstd(values[:, 0])),
            "loss_mean": round_float(_nanmean(values[:, 1])),   # NaN when every model diverged
            "accuracy_mean": round_float(np.nanmean(values[:, 2])),
            "f1_present_mean": round_float(_nanmean(values[:, 3])),   # NaN from a checkpoint made before it
            **self._protocols_row(round),
            **self._generalization_row(round),
        }

    def _protocols_row(self, round: int) -> dict[str, float]:
        """Mean macro-F1 and accuracy under each protocol scored in this round (both, by default)."""
        out = {}
        for protocol in PROTOCOLS:
            values = self.by_protocol.get(protocol, {}).get(round)
            if values is not None and not np.isnan(values[:, 0]).all():
                f1, accuracy = protocol_columns(protocol)
                out[f1] = round_float(np.nanmean(values[:, 0]))
                out[accuracy] = round_float(np.nanmean(values[:, 2]))
        return out

    def _generalization_row(self, round: int) -> dict[str, float]:
        """The generalization columns of a round (none unless evaluation.generalization is on)."""
        values = self.general.get(round)
        if values is None or np.isnan(values).all():
            return {}
        return {"generalization_f1_mean": round_float(np.nanmean(values)),
                "generalization_f1_std": round_float(np.nanstd(values))}

    def last(self) -> list[Evaluation]:
        """Each device's newest evaluation under the run's protocol (NaN for one never evaluated)."""
        return self._newest(self.primary)

    def last_under(self, protocol: str) -> list[Evaluation] | None:
        """Each device's newest evaluation under ``protocol`` (None if it was never scored)."""
        tables = self.by_protocol.get(protocol)
        return self._newest(tables) if tables else None

    def _newest(self, tables: dict[int, np.ndarray]) -> list[Evaluation]:
        out = [Evaluation(float("nan"), float("nan"), float("nan"))] * len(self.device_ids)
        for round in sorted(tables):
            for i, values in enumerate(tables[round]):
                if not np.isnan(values).all():
                    out[i] = Evaluation(*(float(v) for v in values))
        return out

    # -- saving, restoring, merging -----------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The three tables as JSON-compatible data (NaN as None), under the Recorder state's keys."""
        return {
            "evaluations": {str(r): {"time": self.time[r], "values": _saved(self.primary[r])}
                            for r in sorted(self.primary)},
            "protocols": {p: {str(r): _saved(t) for r, t in sorted(tables.items())}
                          for p, tables in sorted(self.by_protocol.items())},
            "generalization": {str(r): [None if np.isnan(v) else float(v) for v in values]
                               for r, values in sorted(self.general.items())},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the tables by those of a Recorder state (older states may lack protocols, generalization)."""
        self.primary = {int(r): _table(ev["values"]) for r, ev in state["evaluations"].items()}
        self.by_protocol = {p: {int(r): _table(rows) for r, rows in tables.items()}
                            for p, tables in state.get("protocols", {}).items()}
        self.time = {int(r): float(ev["time"]) for r, ev in state["evaluations"].items()}
        self.general = {int(r): np.array([np.nan if v is None else v for v in values], dtype=float)
                        for r, values in state.get("generalization", {}).items()}

    def merge(self, other: EvaluationTables) -> None:
        """Copy another's scores (its devices, which must be among these) into these tables."""
        for r in other.primary:
            self.time[r] = max(self.time.get(r, -np.inf), other.time[r])
        for mine, theirs in [(self.primary, other.primary),
                             *((self.by_protocol.setdefault(p, {}), t) for p, t in other.by_protocol.items())]:
            self._merge_tables(mine, theirs, other.device_ids)
        for r, values in other.general.items():
            for device, value in zip(other.device_ids, values):
                if not np.isnan(value):
                    self.generalized(device, r, float(value))

    def _merge_tables(self, mine: dict[int, np.ndarray], theirs: dict[int, np.ndarray], devices: list[int]) -> None:
        """Copy another recorder's evaluation rows (its ``devices``, in order) into ``mine``."""
        for r, values in theirs.items():
            for device, row in zip(devices, values):
                if not np.isnan(row).all():
                    mine.setdefault(r, np.full((len(self.device_ids), len(METRICS)), np.nan))[self.index[device]] = row
