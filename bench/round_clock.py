"""Per-round wall times from the public runner, without changing it: its progress bar is
updated once per finished round, so a stand-in for ``tqdm`` in ``p2pfed.engine.runner``
records when each round ends. Shared by ``bench/speed.py`` and ``bench/scale.py``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class RoundClock:
    """Time stamps (``time.perf_counter``) of every round's end, plus the run's start, and the
    process's CPU time (``time.process_time``) at the same instants."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.ends: list[float] = []
        self.cpu_ends: list[float] = []

    def bar(self, *args: object, **kwargs: object) -> _Bar:
        return _Bar(self)

    @property
    def first_round_s(self) -> float:
        """From the start to the end of round 1: building data, models and sockets, then the
        first round with its warm-up."""
        return self.ends[0] - self.start if self.ends else float("nan")

    @property
    def per_round_s(self) -> float:
        """Mean wall time of the rounds after the first (evaluation rounds included)."""
        if len(self.ends) < 2:
            return float("nan")
        return (self.ends[-1] - self.ends[0]) / (len(self.ends) - 1)

    @property
    def cpu_per_round_s(self) -> float:
        """Mean CPU time of the rounds after the first, every thread of the process together:
        unlike wall time, it does not grow when other jobs share the cores."""
        if len(self.cpu_ends) < 2:
            return float("nan")
        return (self.cpu_ends[-1] - self.cpu_ends[0]) / (len(self.cpu_ends) - 1)


class _Bar:
    def __init__(self, clock: RoundClock) -> None:
        self.clock = clock
        self.n = 0

    def update(self, k: int = 1) -> None:
        self.n += k
        self.clock.ends.append(time.perf_counter())
        self.clock.cpu_ends.append(time.process_time())

    def set_postfix(self, *args: object, **kwargs: object) -> None:
        pass

    def close(self) -> None:
        pass


@contextmanager
def round_clock() -> Iterator[RoundClock]:
    """Within the block, ``run_scenario`` (synchronous rounds) stamps the returned clock."""
    import p2pfed.engine.runner as runner

    clock = RoundClock()
    original = runner.tqdm
    runner.tqdm = clock.bar
    try:
        yield clock
    finally:
        runner.tqdm = original
