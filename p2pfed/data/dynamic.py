"""Data that appears over time (FedSub journal Sec. 4.5): classes hidden at the start, returned later.

A random fraction of the devices lose a random number of their classes (up to a fraction of
them, always keeping one) before round 0; every ``return_every`` rounds each of them gets one
hidden class back, in a random order drawn up front. As in the FedSub papers (ubiquitous Sec.
4.4), a hidden class is out of the device's test set too and returns to both sets together
(``dynamic.test_classes: all`` keeps the test set complete instead; ``DeviceContext``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClassSchedule:
    """Which training classes each device sees in each round."""

    held: tuple[frozenset[int], ...]        # every class in a device's training data
    removed: dict[int, tuple[int, ...]]     # device -> hidden classes, in the order they return
    return_every: int

    def visible(self, device: int, round: int) -> frozenset[int] | None:
        """Classes visible to ``device`` in ``round`` (0-based); None for all of its data."""
        hidden = self.removed.get(device, ())[round // self.return_every:]
        return None if not hidden else self.held[device] - frozenset(hidden)

    def return_rounds(self, rounds: int) -> list[int]:
        """0-based rounds at which some device gets a class back."""
        longest = max((len(v) for v in self.removed.values()), default=0)
        return [k * self.return_every for k in range(1, longest + 1) if k * self.return_every < rounds]


def draw_class_schedule(held: Sequence[np.ndarray], *, devices_fraction: float,
                        max_removed_fraction: float, return_every: int,
                        rng: np.random.Generator) -> ClassSchedule:
    """Pick round(devices_fraction * N) devices; each hides between 1 and
    floor(max_removed_fraction * its class count) classes (never all of them)."""
    if not 0 <= devices_fraction <= 1 or not 0 <= max_removed_fraction < 1:
        raise ValueError(f"devices_fraction must be in [0, 1] and max_removed_fraction in [0, 1), "
                         f"got {devices_fraction}, {max_removed_fraction}")
    if return_every < 1:
        raise ValueError(f"return_every must be >= 1, got {return_every}")
    sets = tuple(frozenset(int(c) for c in np.unique(h)) for h in held)
    chosen = rng.choice(len(sets), size=round(devices_fraction * len(sets)), replace=False)
    removed: dict[int, tuple[int, ...]] = {}
    for d in sorted(int(i) for i in chosen):
        most = min(math.floor(max_removed_fraction * len(sets[d])), len(sets[d]) - 1)
        if most < 1:
            continue
        k = int(rng.integers(1, most + 1))
        removed[d] = tuple(int(c) for c in rng.permutation(sorted(sets[d]))[:k])
    return ClassSchedule(held=sets, removed=removed, return_every=return_every)
