"""Clock offsets between real peers, measured over their own sockets: no time server.

A peer sends each neighbour a ``peer/clock`` ping stamped with its clock (t0); the neighbour
answers at once with its own clock (t1); back at t2, the neighbour's clock is ahead of this
peer's by ``t1 - (t0 + t2) / 2``, give or take half the round trip ``t2 - t0``. The sample with
the shortest round trip is kept. A ping that waited in a queue for a neighbour still starting
gives a long round trip; so a peer that receives a ping while its own reading of the sender is
poor pings it back, and gets a prompt answer.

Why: on a shared round grid, or over contacts, every host counts from one instant by its own
clock. A host whose clock is a sizeable share of the round period off delivers its artifacts
after the round they were shared for, silently lowering the results; a shared start that passed
while the peer was loading runs its first rounds at once. Both are said before the first round.

A peer reads the time of day only through its ``WallClock``: its host's clock, plus the peer
file's ``clock_offset_s`` (0 on real hosts; set to emulate a skewed host, whose peers share the
kernel's clock with the others). Durations are measured on the monotonic clock, which no offset
touches.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from p2pfed.device import Control
from p2pfed.device.wire import encode_control
from p2pfed.scenario.errors import ScenarioError

CLOCK_KIND = "peer/clock"
CLOCK_KINDS = frozenset({CLOCK_KIND})
GOOD_ROUND_TRIP_S = 0.2   # a reading this prompt needs no second ping
WARN_SHARE = 0.1          # shared grid: an offset over this share of the round period is warned of
REFUSE_SHARE = 0.5        # ... and one surely over this share refuses to start


@dataclass(frozen=True)
class WallClock:
    """The unix time as this peer's host reads it: the real clock ``offset_s`` seconds off."""

    offset_s: float = 0.0

    def now(self) -> float:
        return time.time() + self.offset_s

    def monotonic_at(self, unix_time: float) -> float:
        """The monotonic instant at which this clock reads ``unix_time`` (for pacing)."""
        return time.monotonic() + (unix_time - self.now())


@dataclass(frozen=True)
class Reading:
    """A neighbour's clock minus this peer's, and the round trip it was measured over."""

    offset_s: float
    round_trip_s: float


class ClockProbe:
    """This peer's pings and its best reading of each neighbour's clock."""

    def __init__(self, me: int, max_bytes: int) -> None:
        self.me, self.max_bytes = me, max_bytes
        self.best: dict[int, Reading] = {}

    def needs_reading(self, neighbour: int) -> bool:
        """Whether this peer has no prompt reading of ``neighbour``'s clock yet."""
        known = self.best.get(neighbour)
        return known is None or known.round_trip_s > GOOD_ROUND_TRIP_S

    def ping(self, now: float) -> bytes:
        return encode_control(CLOCK_KIND, self.me, now, {"t0": now}, self.max_bytes)

    def take(self, message: Control, now: float) -> list[bytes]:
        """A neighbour's ping (answered, and pinged back while its reading is poor) or its
        answer to this peer's ping (a reading); returns the frames to send to it."""
        t0, t1 = _stamp(message.meta, "t0"), _stamp(message.meta, "t1")
        if t0 is None:
            return []
        if t1 is None:   # a ping
            reply = encode_control(CLOCK_KIND, self.me, now, {"t0": t0, "t1": now}, self.max_bytes)
            return [reply] + ([self.ping(now)] if self.needs_reading(message.sender) else [])
        round_trip = now - t0
        if round_trip >= 0:
            reading = Reading(t1 - (t0 + now) / 2, round_trip)
            known = self.best.get(message.sender)
            if known is None or reading.round_trip_s < known.round_trip_s:
                self.best[message.sender] = reading
        return []

    def report(self) -> dict[str, dict[str, float]]:
        """``peer.json`` ``clock_offsets``: per neighbour, its clock minus this one's and the round trip."""
        return {str(n): {"offset_s": round(r.offset_s, 4), "round_trip_s": round(r.round_trip_s, 4)}
                for n, r in sorted(self.best.items())}

    def grid_warnings(self, neighbours: list[int], period_s: float, where: str) -> list[str]:
        """On a shared grid: raise ScenarioError when a neighbour's clock is surely off by over
        ``REFUSE_SHARE`` of the period; return a warning for each over ``WARN_SHARE`` or unread."""
        warnings, refusals = [], []
        for n in neighbours:
            r = self.best.get(n)
            if r is None:
                warnings.append(f"{where}: no clock reading from neighbour {n} before the shared start "
                                "(it had not started): its clock is not checked")
                continue
            off = abs(r.offset_s)
            side = "ahead of" if r.offset_s > 0 else "behind"
            said = (f"neighbour {n}'s clock is {off:.3f} s {side} this peer's (± {r.round_trip_s / 2:.3f} s), "
                    f"{off / period_s:.0%} of the {period_s:g} s round period")
            if off - r.round_trip_s / 2 > REFUSE_SHARE * period_s:
                refusals.append(f"{where}: shared grid: {said}, over {REFUSE_SHARE:.0%}: its artifacts would "
                                "miss their rounds; synchronise the hosts' clocks (e.g. NTP) or plan a longer "
                                "--round-period")
            elif off > WARN_SHARE * period_s:
                warnings.append(f"{where}: shared grid: {said}, over {WARN_SHARE:.0%}: artifacts may be late")
        if refusals:
            raise ScenarioError(refusals)
        return warnings


def late_start_problem(start_time: float, now: float, period_s: float, loading_s: float, where: str) -> str | None:
    """A shared start that had passed when the peer was ready to run its first round (more than
    ``WARN_SHARE`` of a period ago): what to give instead."""
    late = now - start_time
    if late <= WARN_SHARE * period_s:
        return None
    ahead = max(120, math.ceil(2 * loading_s / 60) * 60)
    return (f"{where}: start_time: the shared start {start_time:.0f} had passed {late:.1f} s before this peer "
            f"was ready (it took {loading_s:.1f} s to load), so its first rounds would all run at once: plan "
            f"again with a later --start-at, e.g. --start-at $(( $(date +%s) + {ahead} )) for hosts that start "
            "within a minute")


def _stamp(meta: dict[str, Any], key: str) -> float | None:
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)
