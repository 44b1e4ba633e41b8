"""Rate-limited logging: a flood of drops writes a bounded log, and the held-back lines are
counted exactly in a periodic summary."""

from __future__ import annotations

import logging
import re

import pytest

from p2pfed.results.ratelimit import RateLimitedLog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_flood_is_logged_at_most_burst_per_kind_per_period_and_summarised_exactly(caplog):
    clock = Clock()
    log = RateLimitedLog(logging.getLogger("test.flood"), burst=3, period_s=10.0, clock=clock)
    sent = {"codec:oversized": 0, "identity": 0}
    with caplog.at_level(logging.INFO, logger="test.flood"):
        for i in range(10_000):           # 10 000 drops over 25 simulated seconds
            clock.now = i * 0.0025
            reason = "identity" if i % 10 == 0 else "codec:oversized"
            sent[reason] += 1
            log.log(logging.WARNING, reason, "dropped message %d: %s", i, reason)
        log.flush()
    lines = [r.getMessage() for r in caplog.records]
    drops = [line for line in lines if line.startswith("dropped message")]
    summaries = [line for line in lines if "held back" in line]
    assert len(drops) == 3 * 2 * 3           # 3 periods (0-10, 10-20, 20-25 s) × 2 kinds × burst 3
    assert len(summaries) == 3               # one per period
    held = {"codec:oversized": 0, "identity": 0}
    for line in summaries:
        for kind, n in re.findall(r"(codec:oversized|identity): (\d+)", line):
            held[kind] += int(n)
    logged = {k: sum(1 for d in drops if d.endswith(k)) for k in sent}
    assert {k: logged[k] + held[k] for k in sent} == sent      # nothing lost, nothing twice
    assert dict(log.held_total) == held


def test_max_lines_bounds_the_log_even_with_many_kinds(caplog):
    log = RateLimitedLog(logging.getLogger("test.kinds"), burst=2, max_lines=5, clock=Clock())
    with caplog.at_level(logging.INFO, logger="test.kinds"):
        emitted = sum(log.log(logging.WARNING, f"peer-{i}", "drop %d", i) for i in range(1000))
        log.flush()
    assert emitted == 5
    assert sum(log.held_total.values()) == 995
    assert "995 more such log lines held back" in caplog.records[-1].getMessage()


def test_tick_summarises_a_finished_period_without_a_new_event(caplog):
    clock = Clock()
    log = RateLimitedLog(logging.getLogger("test.tick"), burst=1, period_s=5.0, clock=clock)
    with caplog.at_level(logging.INFO, logger="test.tick"):
        for _ in range(4):
            log.log(logging.WARNING, "k", "drop")
        log.tick()
        assert len(caplog.records) == 1     # the period is not over yet
        clock.now = 6.0
        log.tick()
    assert caplog.records[-1].getMessage().startswith("3 more such log lines held back")
    with pytest.raises(ValueError):
        RateLimitedLog(logging.getLogger("x"), burst=0)
