"""FedSub's row fusion against cluster-mates that lie: ``algorithm.robust`` per class cluster.

A lying peer can land in a device's cluster for a class (its prototype near the device's, or
copied from it) and then send poisoned rows for that class. With ``robust`` set, each class's
fused rows are not the mates' weighted mean: for every row the fusion rule fuses (Eq. 9's rows
all mates hold, or Eq. 6's rows some mate holds), the candidates are the device's own current
row and the rows of the other mates that hold it, combined by ``learning/robust_fusion.combine``
(median, trimmed mean, (multi-)Krum or norm clipping against the own row), over all the rows
with the same holders at once (one vector per candidate). The result is the class's update,
which then joins the other classes' as in Eq. 7/10. The device trusts itself: its own row is
always a candidate, so a row held by no honest mate cannot be taken over by a majority of liars
unless they outnumber the device and its honest mates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import math
from dataclasses import dataclass

import numpy as np
import torch

from p2pfed.algorithms.fedsub.row_fusion import normalised_scores, row_weights
from p2pfed.learning.robust_fusion import combine, set_aside
from p2pfed.learning.units import UnitLayer

Params = Mapping[str, torch.Tensor]


@dataclass
class RobustCount:
    """What the robust combinations of one fusion did: row groups combined, candidates offered,
    and candidates left out (Krum: not selected; clip: shortened)."""

    groups: int = 0
    candidates: int = 0
    set_aside: int = 0


def robust_class_rows(own: Params, mates: Sequence[Params], own_position: int | None, units: np.ndarray,
                      scores: Sequence[float], fusion: str, layers: Sequence[UnitLayer], rule: str,
                      count: RobustCount, *, trim_fraction: float = 0.2, byzantine: int = 1, select: int = 1,
                      clip_norm: float = 1.0) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """One class cluster's update under ``rule``: dense parameters (zero outside the fused rows)
    and the fused rows (a bool per unit, every layer end to end). ``mates[own_position]`` is this
    device (None: it is not a mate for this class); ``units``: each mate's class mask; the
    keywords are ``combine``'s."""
    _, fused = row_weights(fusion, units, scores)
    weights = normalised_scores(scores)
    others = [j for j in range(len(mates)) if j != own_position]
    own_weight = float(weights[own_position]) if own_position is not None else 1.0
    update = {name: torch.zeros_like(value) for name, value in own.items()}
    rows = np.flatnonzero(fused)
    if rows.size == 0:
        return update, fused
    holders = units[others][:, rows] if others else np.zeros((0, rows.size), dtype=bool)
    patterns, group_of = np.unique(holders.T, axis=0, return_inverse=True)
    slices = _layer_slices(layers)
    for g, pattern in enumerate(patterns):
        group_rows = rows[group_of.reshape(-1) == g]
        held_by = [others[j] for j in np.flatnonzero(pattern)]
        candidates = [own, *(mates[j] for j in held_by)]
        matrix = np.stack([_gather(c, group_rows, slices) for c in candidates])
        w = np.array([own_weight, *(float(weights[j]) for j in held_by)])
        combined = matrix[0] if len(candidates) == 1 else combine(
            matrix, w, rule, trim_fraction=trim_fraction, byzantine=byzantine, select=select, clip_norm=clip_norm)
        count.groups += 1
        count.candidates += len(candidates)
        count.set_aside += set_aside(matrix, rule, byzantine=byzantine, select=select, clip_norm=clip_norm)
        _scatter(update, combined, group_rows, slices)
    return update, fused


def _layer_slices(layers: Sequence[UnitLayer]) -> list[tuple[UnitLayer, int, int]]:
    """(layer, first row, end row) of every layer in the end-to-end row numbering."""
    starts = np.cumsum([0, *(layer.size for layer in layers[:-1])])
    return [(layer, int(a), int(a) + layer.size) for layer, a in zip(layers, starts)]


def _gather(values: Params, rows: np.ndarray, slices: list[tuple[UnitLayer, int, int]]) -> np.ndarray:
    """The given rows of every unit parameter, layer by layer, as one vector."""
    parts = []
    for layer, a, b in slices:
        local = rows[(rows >= a) & (rows < b)] - a
        if local.size:
            idx = torch.as_tensor(local)
            parts += [values[name].detach()[idx].reshape(-1).numpy() for name in layer.params]
    return np.concatenate(parts).astype(np.float64)


def _scatter(update: dict[str, torch.Tensor], vector: np.ndarray, rows: np.ndarray,
             slices: list[tuple[UnitLayer, int, int]]) -> None:
    """Inverse of ``_gather``: write the vector back into the given rows of ``update``."""
    at = 0
    for layer, a, b in slices:
        local = rows[(rows >= a) & (rows < b)] - a
        if not local.size:
            continue
        idx = torch.as_tensor(local)
        for name in layer.params:
            target = update[name]
            count = local.size * math.prod(target.shape[1:])
            target[idx] = torch.as_tensor(vector[at:at + count].reshape(local.size, *target.shape[1:]),
                                          dtype=target.dtype)
            at += count
