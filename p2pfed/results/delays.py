"""How long messages took from their sender to a receiver: a histogram every runtime fills alike.

Why a histogram and not the list of delays: a 10,000-device run delivers millions of messages,
and the figure must survive checkpoints and merge across real peers' recorders; a fixed set of
logarithmic bins (100 per decade, so a quantile is within 1.2 % of the exact one) does both in a
few kilobytes. The delay of one message is its arrival time at the receiver's intake minus the
``sent_at`` its sender stamped: simulated seconds in the simulator, wall-clock seconds on real
peers (on different hosts, as good as their clocks' agreement; a delay below zero is counted apart
as ``negative``, a sign of clock skew). Copies carried by a relay are left out: their ``sent_at``
is the origin's, so they measure the artifact's age, not a link.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

BINS_PER_DECADE = 100
LOWEST_S = 1e-6   # delays below a microsecond share the first bin


class DelayHistogram:
    """Delivery delays in logarithmic bins, with the exact extremes."""

    def __init__(self) -> None:
        self.bins: Counter[int] = Counter()
        self.count = 0
        self.negative = 0
        self.max_s = 0.0

    def add(self, delay_s: float) -> None:
        if not math.isfinite(delay_s):
            return
        if delay_s < 0:
            self.negative += 1
        self.count += 1
        self.max_s = max(self.max_s, delay_s)
        self.bins[_bin(delay_s)] += 1

    def quantile(self, q: float) -> float | None:
        """The delay below which a fraction ``q`` of the messages arrived (the bin's geometric
        centre: within 1.2 % of the exact quantile); None without messages."""
        if not self.count:
            return None
        rank, seen = q * self.count, 0
        for b in sorted(self.bins):
            seen += self.bins[b]
            if seen >= rank:
                return min(10 ** ((b + 0.5) / BINS_PER_DECADE), self.max_s)
        return self.max_s

    def summary(self) -> dict[str, Any]:
        """What ``summary.json`` reports under ``comm.delivery_time_s``."""
        median, p95 = self.quantile(0.5), self.quantile(0.95)
        return {"count": self.count, "median": None if median is None else float(f"{median:.6g}"),
                "p95": None if p95 is None else float(f"{p95:.6g}"),
                "max": float(f"{self.max_s:.6g}") if self.count else None, "negative": self.negative}

    def merge(self, other: DelayHistogram) -> None:
        self.bins.update(other.bins)
        self.count += other.count
        self.negative += other.negative
        self.max_s = max(self.max_s, other.max_s)

    def state_dict(self) -> dict[str, Any]:
        return {"bins": {str(b): n for b, n in sorted(self.bins.items())}, "count": self.count,
                "negative": self.negative, "max_s": self.max_s}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.bins = Counter({int(b): int(n) for b, n in state["bins"].items()})
        self.count, self.negative = int(state["count"]), int(state["negative"])
        self.max_s = float(state["max_s"])


def _bin(delay_s: float) -> int:
    return math.floor(math.log10(max(delay_s, LOWEST_S)) * BINS_PER_DECADE)
