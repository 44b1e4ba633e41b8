"""FedSub's fusion (Eq. 6-10) for all of a device's classes at once, row by row.

A class subnetwork keeps or drops whole units, so every parameter mask of
``p2pfed.learning.fusion`` is a unit mask repeated along the rows of a layer's weight and bias.
Working on the unit masks directly, each fusion rule becomes a weight per (member, row), the
class updates sum into one (member, row) weight matrix per layer, and a layer's new rows are one
weighted sum over the members' rows: no parameter-sized masks, no per-class stacks. The
parameter-level functions in ``fusion.py`` stay the reference a test compares this against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class ClassCluster:
    """One class's fusion input: which members take part (indices into the member list given to
    ``fuse_rows``), each member's unit mask per layer for this class, and its reliability score."""

    members: list[int]
    units: list[Sequence[np.ndarray]]   # per member: one boolean unit mask per layer
    scores: list[float]


def _normalised(scores: Sequence[float]) -> np.ndarray:
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
    w = _normalised(scores)
    if rule == "overlap":
        held = units.all(axis=0)
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
        units = np.stack([np.concatenate(u) for u in cluster.units]).astype(bool)
        weights, held = row_weights(rule, units, cluster.scores)
        total[cluster.members] += weights   # a cluster names each member once
        count += held
    hit = count > 0
    return total / np.where(hit, count, 1.0), hit


def fuse_rows(own: Params, members: Sequence[Params], clusters: Sequence[ClassCluster], rule: str,
              num_layers: int) -> Params:
    """The device's parameters after fusing every class cluster: rows no cluster holds keep
    ``own``'s values; the others become the weighted sum of the members' rows (float64, then the
    parameter's own dtype). Parameters that are not ``layers.{i}.weight/bias`` are kept."""
    new = dict(own)
    if not clusters:
        return new
    sizes = [own[f"layers.{i}.bias"].shape[0] for i in range(num_layers)]
    all_weights, all_hit = member_row_weights(rule, clusters, len(members), sum(sizes))
    for i, (a, b) in enumerate(zip(np.cumsum([0, *sizes[:-1]]), np.cumsum(sizes))):
        weights, hit = all_weights[:, a:b], all_hit[a:b]
        if not hit.any():
            continue
        coef = torch.from_numpy(np.ascontiguousarray(weights))
        hit_t = torch.from_numpy(np.ascontiguousarray(hit))
        for name in (f"layers.{i}.weight", f"layers.{i}.bias"):
            shape = (-1, *([1] * (own[name].dim() - 1)))   # a row's weight against its whole row
            fused = torch.zeros(own[name].shape, dtype=torch.float64)
            for m in np.flatnonzero(weights.any(axis=1)):
                fused.addcmul_(coef[m].view(shape), members[m][name])   # float64 accumulator
            new[name] = torch.where(hit_t.view(shape), fused, own[name].to(torch.float64)).to(own[name].dtype)
    return new
