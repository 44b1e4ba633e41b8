"""One place that turns runtime events into the numbers the results files report.

Every runtime (synchronous rounds, opportunistic contacts, a real peer) feeds the same events to
a Recorder as they happen — sent, delivered, dropped with a reason, transfer started / completed
/ aborted, lost, fused, evaluated — so rounds.csv and summary.json mean the same thing whichever
produced them. A real peer records only its own device; the launcher merges the peers' recorders
(``Recorder.merge``) into the one a simulation would have filled.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from p2pfed.learning.training import Evaluation
from p2pfed.results.delays import DelayHistogram
from p2pfed.results.evaluations import (
    GENERALIZATION_COLUMNS,
    METRICS,
    PROTOCOLS,
    EvaluationTables,
    protocol_columns,
    round_float,
)
from p2pfed.results.ratelimit import RateLimitedLog

# the evaluation tables' names stay importable from here, where the results writers look
__all__ = ["GENERALIZATION_COLUMNS", "METRICS", "PROTOCOLS", "TRAFFIC_COLUMNS", "DeviceCounters",
           "EvaluationTables", "Recorder", "protocol_columns", "round_float"]

log = logging.getLogger("p2pfed.results")

TRAFFIC_COLUMNS = ("bytes_sent_total", "messages_sent", "messages_dropped")


@dataclass
class DeviceCounters:
    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    messages_dropped: int = 0
    messages_late: int = 0      # arrived after the fusion they were shared for (fused a round later)
    messages_repeated: int = 0  # a second copy of an artifact already received (a restart's re-sent frames)
    transfers_started: int = 0
    transfers_completed: int = 0
    transfers_aborted: int = 0
    bytes_wasted: int = 0


class Recorder:
    """Counters per device, traffic per round (or evaluation interval) and evaluations per round.

    ``devices``: the ids of the devices recorded here (all of a simulation's, or one peer's own).
    Rounds are 0-based here; rounds.csv shows them 1-based.
    """

    def __init__(self, devices: int | Sequence[int], time_origin: float = 0.0) -> None:
        """``time_origin``: subtracted from evaluation times (a real peer's run start, in epoch seconds)."""
        self.time_origin = float(time_origin)
        self.device_ids = list(range(devices)) if isinstance(devices, int) else [int(d) for d in devices]
        self.index = {d: i for i, d in enumerate(self.device_ids)}
        self.devices = [DeviceCounters() for _ in self.device_ids]
        self.traffic_by_round: dict[int, Counter] = {}
        self.drop_reasons: Counter = Counter()
        self.evaluations = EvaluationTables(self.device_ids)
        self.fused_count = 0
        self.fused_age_sum = 0.0
        self.delivery_times = DelayHistogram()   # sender's sent_at to the receiver's intake, direct messages
        # the same less each sender-receiver pair's first message, which pays the connection's
        # setup on real peers: the steady state apart from the start
        self.delivery_times_after_first = DelayHistogram()
        self._pairs_heard: set[tuple[int, int]] = set()
        # A hostile peer can make drops at will: their log lines are rate-limited (the counts
        # above stay exact).
        self.drop_log = RateLimitedLog(log)

    @property
    def num_devices(self) -> int:
        return len(self.device_ids)

    def _counters(self, device: int) -> DeviceCounters:
        return self.devices[self.index[device]]

    # -- events ------------------------------------------------------------------------------
    def sent(self, src: int, nbytes: int, round: int) -> None:
        """A message of ``nbytes`` encoded bytes left ``src`` in ``round`` (once per destination)."""
        d = self._counters(src)
        d.bytes_sent += nbytes
        d.messages_sent += 1
        self.traffic(round).update(bytes_sent_total=nbytes, messages_sent=1)

    def delivered(self, dst: int, nbytes: int) -> None:
        """A message passed every check of ``dst``'s intake and reached its algorithm."""
        d = self._counters(dst)
        d.bytes_received += nbytes
        d.messages_received += 1

    def arrived(self, delay_s: float, sender: int, receiver: int) -> None:
        """A message came straight from ``sender`` (not carried) to ``receiver`` ``delay_s`` after
        it was sent."""
        self.delivery_times.add(delay_s)
        if (sender, receiver) in self._pairs_heard:
            self.delivery_times_after_first.add(delay_s)
        else:
            self._pairs_heard.add((sender, receiver))

    def heard_by(self, receiver: int) -> set[int]:
        """The senders from which at least one message came straight to ``receiver``."""
        return {s for s, r in self._pairs_heard if r == receiver}

    def late(self, dst: int) -> None:
        """A message reached ``dst`` after the fusion it was shared for: fused a round later, if at all."""
        self._counters(dst).messages_late += 1

    def dropped(self, src: int | None, dst: int, round: int, reason: str, detail: str = "") -> None:
        """A message (counted in ``round``) that never reached ``dst``'s algorithm: logged and counted.
        ``src`` is None when the sender is unknown."""
        self._counters(dst).messages_dropped += 1
        self.drop_reasons[reason] += 1
        self.traffic(round).update(messages_dropped=1)
        who = "an unknown peer" if src is None else f"peer {src}"
        self.drop_log.log(logging.WARNING, reason, "peer %d dropped a message from %s: %s %s",
                          dst, who, reason, detail)

    def repeated(self, dst: int, src: int | None, detail: str = "") -> None:
        """A second copy of an artifact ``dst`` already has, refused: not a loss (nothing is
        missing), counted apart from the drops."""
        self._counters(dst).messages_repeated += 1
        log.info("peer %d refused a second copy from %s: %s", dst, "an unknown peer" if src is None else f"peer {src}",
                 detail)

    def transfer_started(self, src: int) -> None:
        """``src`` began putting a message on a link."""
        self._counters(src).transfers_started += 1

    def transfer_completed(self, src: int) -> None:
        """The last byte of a message left ``src`` (it may still be lost or rejected)."""
        self._counters(src).transfers_completed += 1

    def transfer_aborted(self, src: int, dst: int, nbytes_on_air: int, reason: str) -> None:
        """A transfer cut short (contact ended, a device went offline): its bytes were wasted."""
        d = self._counters(src)
        d.transfers_aborted += 1
        d.bytes_wasted += nbytes_on_air
        log.info("aborted transfer from peer %d to peer %d after %d bytes: %s", src, dst, nbytes_on_air, reason)

    def lost(self, src: int, dst: int, nbytes: int, round: int) -> None:
        """A fully sent message the link lost: dropped, and its bytes wasted."""
        self._counters(src).bytes_wasted += nbytes
        self._counters(dst).messages_dropped += 1
        self.drop_reasons["loss"] += 1   # expected on a lossy link: counted, not logged
        self.traffic(round).update(messages_dropped=1)

    def fused(self, ages: Iterable[float]) -> None:
        """A fusion used artifacts of these ages (seconds since their owner made them)."""
        for age in ages:
            self.fused_count += 1
            self.fused_age_sum += float(age)

    def evaluated(self, device: int, round: int, time_s: float, evaluation: Evaluation, *,
                  protocol: str | None = None, primary: bool = True) -> None:
        """``device`` evaluated its model after ``round`` (0-based) at ``time_s``: under the run's
        own protocol (``primary``: the headline columns) and/or, named, one of ``PROTOCOLS``."""
        self.evaluations.evaluated(device, round, float(time_s) - self.time_origin, evaluation,
                                   protocol=protocol, primary=primary)

    def generalized(self, device: int, round: int, f1_macro: float) -> None:
        """``device``'s model scored ``f1_macro`` on the other devices' pooled test data after ``round``."""
        self.evaluations.generalized(device, round, f1_macro)

    # -- reading -----------------------------------------------------------------------------
    @property
    def mean_fused_age_s(self) -> float | None:
        return self.fused_age_sum / self.fused_count if self.fused_count else None

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
        return self.total("bytes_sent")

    @property
    def messages_sent(self) -> int:
        return self.total("messages_sent")

    @property
    def messages_dropped(self) -> int:
        return self.total("messages_dropped")

    @property
    def latest(self) -> dict | None:
        """The metrics of the newest evaluated round (no traffic columns), for progress displays."""
        return self.evaluations.metrics_row(max(self.evaluations.primary)) if self.evaluations.primary else None

    @property
    def last_evaluations(self) -> list[Evaluation]:
        """Each device's newest evaluation (NaN for a device never evaluated): devices.csv."""
        return self.evaluations.last()

    def last_evaluations_under(self, protocol: str) -> list[Evaluation] | None:
        """Each device's newest evaluation under ``protocol`` (None if it was never scored)."""
        return self.evaluations.last_under(protocol)

    @property
    def rows(self) -> list[dict]:
        """rounds.csv rows: metrics plus cumulative traffic through each evaluated round."""
        out: list[dict[str, Any]] = []
        total: Counter[str] = Counter()
        pending = sorted(self.traffic_by_round.items())
        for round in sorted(self.evaluations.primary):
            while pending and pending[0][0] <= round:
                total.update(pending.pop(0)[1])
            out.append({**self.evaluations.metrics_row(round), **{k: total.get(k, 0) for k in TRAFFIC_COLUMNS}})
        return out

    # -- saving, restoring, merging -----------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything recorded, as JSON-compatible data (NaN as None): checkpoints and peer.json."""
        tables = self.evaluations.state_dict()
        return {
            "devices": self.device_ids,
            "time_origin": self.time_origin,
            "counters": [vars(d).copy() for d in self.devices],
            "traffic": {str(r): dict(c) for r, c in sorted(self.traffic_by_round.items())},
            "drop_reasons": dict(self.drop_reasons),
            "evaluations": tables["evaluations"],
            "protocols": tables["protocols"],
            "fused": [self.fused_count, self.fused_age_sum],
            "delivery_times": self.delivery_times.state_dict(),
            "delivery_times_after_first": self.delivery_times_after_first.state_dict(),
            "pairs_heard": sorted([s, r] for s, r in self._pairs_heard),
            "generalization": tables["generalization"],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace everything recorded by what ``state_dict`` returned (same devices)."""
        if [int(d) for d in state["devices"]] != self.device_ids:
            raise ValueError(f"recorder state for devices {state['devices']}, not {self.device_ids}")
        self.time_origin = float(state["time_origin"])
        names = {f.name for f in fields(DeviceCounters)}
        self.devices = [DeviceCounters(**{k: v for k, v in c.items() if k in names}) for c in state["counters"]]
        self.traffic_by_round = {int(r): Counter(c) for r, c in state["traffic"].items()}
        self.drop_reasons = Counter(state["drop_reasons"])
        self.evaluations.load_state_dict(state)
        self.fused_count, self.fused_age_sum = int(state["fused"][0]), float(state["fused"][1])
        self.delivery_times = DelayHistogram()
        self.delivery_times_after_first = DelayHistogram()
        if "delivery_times" in state:   # states written before the histogram have none
            self.delivery_times.load_state_dict(state["delivery_times"])
        if "delivery_times_after_first" in state:
            self.delivery_times_after_first.load_state_dict(state["delivery_times_after_first"])
        self._pairs_heard = {(int(s), int(r)) for s, r in state.get("pairs_heard", [])}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Recorder:
        rec = cls(state["devices"])
        rec.load_state_dict(state)
        return rec

    @classmethod
    def merge(cls, parts: Sequence[Recorder], devices: Iterable[int] | None = None) -> Recorder:
        """One recorder over the devices of several (each peer's own, or each shard's), in the
        given order, or in the order of ``devices`` (which must be theirs)."""
        rec = cls([d for p in parts for d in p.device_ids] if devices is None else list(devices))
        for part in parts:
            for device, counters in zip(part.device_ids, part.devices):
                rec.devices[rec.index[device]] = DeviceCounters(**vars(counters))
            for r, c in part.traffic_by_round.items():
                rec.traffic(r).update(c)
            rec.drop_reasons.update(part.drop_reasons)
            rec.evaluations.merge(part.evaluations)
            rec.fused_count += part.fused_count
            rec.fused_age_sum += part.fused_age_sum
            rec.delivery_times.merge(part.delivery_times)
            rec.delivery_times_after_first.merge(part.delivery_times_after_first)
            rec._pairs_heard |= part._pairs_heard
        return rec
