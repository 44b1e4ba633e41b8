"""Python's cyclic garbage collector during a run: collected less often.

A run keeps many objects alive for a while (each device's cached messages, their payloads and
signatures, pending events) and makes many more that live a little and die. With the default
thresholds (a young collection every 700 allocations) those survive into the oldest generation,
whose collections scan every tracked object of the run, again and again as the heap grows. A
larger young generation lets short-lived objects die before they are promoted, so full
collections become rare. Nothing a run computes depends on when cycles are collected: results
are the same.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_OBJECTS = 50_000   # allocations between young-generation collections during a run


@contextmanager
def fewer_collections(young: int = YOUNG_OBJECTS) -> Iterator[None]:
    """Collect the youngest generation every ``young`` net allocations while inside (the older
    generations keep their ratios), and restore the previous thresholds on leaving."""
    if young < 1:
        raise ValueError(f"young must be >= 1, got {young}")
    old = gc.get_threshold()
    if old[0] > 0:   # a threshold of 0 turned collection off: leave it off
        gc.set_threshold(max(young, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
