"""Rate-limited logging for events a hostile peer can trigger at will (dropped messages).

Why: one log line per dropped message lets a sender fill the disk (a 10-second flood wrote
40 MB). Each kind of line (its ``key``, e.g. the drop reason) is logged at most ``burst`` times
per ``period_s``, and all lines at most ``max_lines`` times; the rest are held back and counted,
and one summary line per period says exactly how many of each were held back. The results
files count every drop on their own; this only limits what reaches the log.

Keys should be few (a reason, not a message or a sender id a peer could vary); ``max_lines``
bounds the log even if they are not.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable


class RateLimitedLog:
    """Log through ``logger``, at most ``burst`` lines per key and ``max_lines`` in all per period."""

    def __init__(self, logger: logging.Logger, *, burst: int = 10, period_s: float = 10.0,
                 max_lines: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if burst < 1 or period_s <= 0:
            raise ValueError(f"burst must be >= 1 and period_s > 0, got {burst} and {period_s}")
        self.logger = logger
        self.burst = burst
        self.period_s = period_s
        self.max_lines = 5 * burst if max_lines is None else max_lines
        self.clock = clock
        self._window_start: float | None = None
        self._logged: Counter = Counter()       # lines logged per key in this period
        self._held: Counter = Counter()         # lines held back per key since the last summary
        self._held_level = logging.NOTSET
        self.held_total: Counter = Counter()    # lines held back per key since the start

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` unless ``key`` (or the period) has used up its lines; True if logged."""
        self.tick()
        if self._window_start is None:
            self._window_start = self.clock()
        if self._logged[key] >= self.burst or sum(self._logged.values()) >= self.max_lines:
            self._held[key] += 1
            self.held_total[key] += 1
            self._held_level = max(self._held_level, level)
            return False
        self._logged[key] += 1
        self.logger.log(level, msg, *args)
        return True

    def tick(self) -> None:
        """Start a new period if the current one is over (summarising it); call it now and then
        (e.g. from a wait loop) so a summary does not wait for the next logged event."""
        if self._window_start is not None and self.clock() - self._window_start >= self.period_s:
            self.flush()
            self._window_start = None
            self._logged.clear()

    def flush(self) -> None:
        """Log the summary of the lines held back since the last one, if any (e.g. at exit)."""
        if not self._held:
            return
        total = sum(self._held.values())
        detail = ", ".join(f"{key}: {n}" for key, n in sorted(self._held.items()))
        self.logger.log(self._held_level, "%d more such log lines held back (rate limit %d per %g s "
                        "per kind): %s", total, self.burst, self.period_s, detail)
        self._held.clear()
        self._held_level = logging.NOTSET
