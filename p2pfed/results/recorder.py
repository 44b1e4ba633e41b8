"""One place that turns runtime events into the numbers the results files report.

Both runtimes (the SimPy simulation and real peers) call the same methods, so rounds.csv and
summary.json mean the same thing whichever produced them.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from p2pfed.learning.training import Evaluation

log = logging.getLogger("p2pfed.results")


@dataclass
class DeviceCounters:
    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    messages_dropped: int = 0
    transfers_started: int = 0
    transfers_completed: int = 0
    transfers_aborted: int = 0
    bytes_wasted: int = 0


@dataclass
class Recorder:
    num_devices: int
    traffic_by_round: dict[int, Counter] = field(default_factory=dict)
    _metrics: list[tuple[int, dict]] = field(default_factory=list)
    devices: list[DeviceCounters] = field(init=False)
    drop_reasons: Counter = field(default_factory=Counter)
    last_evaluations: list[Evaluation] = field(default_factory=list)
    fused_ages: list[float] = field(default_factory=list)   # age of every artifact a fusion used

    def __post_init__(self) -> None:
        self.devices = [DeviceCounters() for _ in range(self.num_devices)]

    def sent(self, src: int, nbytes: int, round: int) -> None:
        """A message of ``nbytes`` encoded bytes left ``src`` in ``round`` (once per destination)."""
        d = self.devices[src]
        d.bytes_sent += nbytes
        d.messages_sent += 1
        self.traffic(round).update(bytes_sent_total=nbytes, messages_sent=1)

    def delivered(self, dst: int, nbytes: int) -> None:
        d = self.devices[dst]
        d.bytes_received += nbytes
        d.messages_received += 1

    def dropped(self, src: int, dst: int, round: int, reason: str, detail: str = "") -> None:
        """A message (sent in ``round``) that never reached the algorithm: logged and counted."""
        self.devices[dst].messages_dropped += 1
        self.drop_reasons[reason] += 1
        self.traffic(round).update(messages_dropped=1)
        log.warning("dropped message from peer %d to peer %d: %s %s", src, dst, reason, detail)

    def transfer_started(self, src: int) -> None:
        """``src`` began putting a message on a link."""
        self.devices[src].transfers_started += 1

    def transfer_completed(self, src: int) -> None:
        """The last byte of a message left ``src`` (it may still be lost or rejected)."""
        self.devices[src].transfers_completed += 1

    def transfer_aborted(self, src: int, dst: int, nbytes_on_air: int, reason: str) -> None:
        """A transfer cut short (contact ended, a device went offline): its bytes were wasted."""
        d = self.devices[src]
        d.transfers_aborted += 1
        d.bytes_wasted += nbytes_on_air
        log.info("aborted transfer from peer %d to peer %d after %d bytes: %s", src, dst, nbytes_on_air, reason)

    def lost(self, src: int, dst: int, nbytes: int, round: int) -> None:
        """A fully sent message the link lost: dropped, and its bytes wasted."""
        self.devices[src].bytes_wasted += nbytes
        self.devices[dst].messages_dropped += 1
        self.drop_reasons["loss"] += 1   # expected on a lossy link: counted, not logged
        self.traffic(round).update(messages_dropped=1)

    def fused(self, ages: list[float]) -> None:
        """A fusion used artifacts of these ages (seconds since their owner made them)."""
        self.fused_ages.extend(ages)

    def total(self, counter: str) -> int:
        return sum(getattr(d, counter) for d in self.devices)

    def traffic(self, round: int) -> Counter:
        """The traffic tallies of one round (sent in that round), created on first use."""
        return self.traffic_by_round.setdefault(round, Counter())

    def counters(self) -> dict[str, int]:
        """Traffic totals over all devices now (the rounds.csv traffic columns)."""
        return {"bytes_sent_total": self.bytes_sent_total, "messages_sent": self.messages_sent,
                "messages_dropped": self.messages_dropped}

    @property
    def bytes_sent_total(self) -> int:
        return sum(d.bytes_sent for d in self.devices)

    @property
    def messages_sent(self) -> int:
        return sum(d.messages_sent for d in self.devices)

    @property
    def messages_dropped(self) -> int:
        return sum(d.messages_dropped for d in self.devices)

    def evaluation(self, round: int, sim_time_s: float, evals: list[Evaluation]) -> dict:
        """Record the evaluation of every device after ``round`` (0-based); metrics are averaged
        over devices, traffic columns count what was sent in rounds 0..round."""
        f1 = np.array([e.f1_macro for e in evals], dtype=float)
        row = {
            "round": round + 1,
            "sim_time_s": round_float(sim_time_s),
            "f1_macro_mean": round_float(np.nanmean(f1)),
            "f1_macro_std": round_float(np.nanstd(f1)),
            "loss_mean": round_float(np.nanmean([e.loss for e in evals])),
            "accuracy_mean": round_float(np.nanmean([e.accuracy for e in evals])),
        }
        self._metrics.append((round, row))
        self.last_evaluations = list(evals)
        return row

    @property
    def latest(self) -> dict | None:
        """The metrics of the newest evaluation (no traffic columns), for progress displays."""
        return self._metrics[-1][1] if self._metrics else None

    @property
    def rows(self) -> list[dict]:
        """rounds.csv rows: metrics plus cumulative traffic through each evaluated round."""
        out, total, pending = [], Counter(), sorted(self.traffic_by_round.items())
        for round, row in sorted(self._metrics, key=lambda m: m[0]):
            while pending and pending[0][0] <= round:
                total.update(pending.pop(0)[1])
            out.append({**row, **{k: total.get(k, 0) for k in TRAFFIC_COLUMNS}})
        return out


TRAFFIC_COLUMNS = ("bytes_sent_total", "messages_sent", "messages_dropped")


def round_float(x: float, digits: int = 6) -> float:
    """Round for stable, readable output files."""
    return float(round(float(x), digits))
