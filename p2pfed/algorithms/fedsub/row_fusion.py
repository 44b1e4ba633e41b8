"""FedSub's fusion (Eq. 6-10) for all of a device's classes at once, row by row.

A class subnetwork keeps or drops whole units, so every parameter mask of
``reference_fusion`` is a unit mask repeated along the rows of a layer's weight and bias.
Working on the unit masks directly, each fusion rule becomes a weight per (member, row), the
class updates sum into one (member, row) weight matrix per layer, and a layer's new rows are one
weighted sum over the members' rows (a ``FusionJob`` of ``batched_fusion``): no parameter-sized
masks, no per-class stacks. The parameter-level functions in ``fusion.py`` stay the reference a
test compares this against.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from p2pfed.learning.batched_fusion import FusionJob, Source
from p2pfed.learning.units import UnitLayer

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class ClassCluster:
    """One class's fusion input: which members take part (indices into the member list given to
    ``row_fusion_job``), each member's unit mask for this class, and its reliability score."""

    members: list[int]
    units: np.ndarray   # (members, rows) bool: each member's class mask, every layer's units end to end
    scores: list[float]


def normalised_scores(scores: Sequence[float]) -> np.ndarray:
    """Scores divided by the cluster maximum, as in the paper (all-zero → equal weights)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        raise ValueError("a cluster needs at least one member")
    if (s < 0).any() or not np.isfinite(s).all():
        raise ValueError(f"reliability scores must be finite and >= 0, got {list(scores)}")
    top = s.max()
    return np.ones_like(s) if top == 0.0 else s / top


def row_weights(rule: str, units: np.ndarray, scores: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """One class cluster on one layer: the weight of each member's row in the fused row
    (members × rows, zero where the fused subnetwork does not hold the row) and the rows it holds.

    ``overlap`` (Eq. 9): score-weighted mean where every member holds the row; ``cluster-avg``
    (Eq. 6): score-weighted mean over the members that hold it; ``leadership`` (Eq. 8): the
    highest score's rows (first on ties)."""
    w = normalised_scores(scores)
    if rule == "overlap":
        held = cast(np.ndarray, units.all(axis=0))
        return np.outer(w / w.sum(), held), held
    if rule == "cluster-avg":
        wm = w[:, None] * units
        total = wm.sum(axis=0)
        held = total > 0
        return wm / np.where(held, total, 1.0), held
    if rule == "leadership":
        leader = int(np.argmax(w))
        weights = np.zeros(units.shape, dtype=np.float64)
        weights[leader] = units[leader]
        return weights, units[leader].astype(bool)
    raise ValueError(f"unknown fusion rule {rule!r}; choose overlap, cluster-avg or leadership")


def member_row_weights(rule: str, clusters: Sequence[ClassCluster], num_members: int,
                       rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 7/10 folded in: a row's new value is the mean of the class updates that hold it, so
    each member's weight on the row is its weight summed over those classes, over their number.
    Rows are every layer's units end to end (the rules treat rows independently).
    Returns (members × rows weights, rows some class holds)."""
    total = np.zeros((num_members, rows), dtype=np.float64)
    count = np.zeros(rows, dtype=np.float64)
    for cluster in clusters:
        weights, held = row_weights(rule, np.asarray(cluster.units, dtype=bool), cluster.scores)
        total[cluster.members] += weights   # a cluster names each member once
        count += held
    hit = count > 0
    return total / np.where(hit, count, 1.0), hit


def row_fusion_job(targets: Params, members: Sequence[Mapping[str, Source]],
                   clusters: Sequence[ClassCluster], rule: str, layers: Sequence[UnitLayer]) -> FusionJob | None:
    """The device's fusion of every class cluster into ``targets`` (the parameters of each
    layer's units, ``learning/units.py``): rows some cluster holds become the weighted sum of the
    members' rows, the others keep the targets' values (the targets join as the last member,
    weight 1 on those rows); None when no cluster holds a row."""
    if not clusters:
        return None
    sizes = [layer.size for layer in layers]
    all_weights, all_hit = member_row_weights(rule, clusters, len(members), sum(sizes))
    coef: dict[str, np.ndarray] = {}
    for layer, a, b in zip(layers, np.cumsum([0, *sizes[:-1]]), np.cumsum(sizes)):
        hit = all_hit[a:b]
        if not hit.any():
            continue
        weights = np.vstack([all_weights[:, a:b], (~hit)[None].astype(np.float64)])
        for name in layer.params:
            coef[name] = weights
    return FusionJob(targets, [*members, targets], coef) if coef else None
