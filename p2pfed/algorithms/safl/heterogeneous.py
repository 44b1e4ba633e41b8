"""Fusing pruned sub-models of different structures (SAFL Sec. III-B5 and III-C).

Every model here is dense (pruned elements are simply not *held*), with a boolean mask per
parameter saying which elements the sender's sub-model holds (``slimming.element_masks``).
Two fusions share one masked mean:

* ``fuse_cluster`` (stage one, Fig. 3): count how many cluster members keep each unit (the
  overlap counter), keep the most frequent units up to the round's pruning rate, and average
  each kept element over the members that hold it — one cluster model with one structure.
* ``preserve_personal`` (stage two, Hermes's personalization-preserving aggregation as SAFL
  Alg. 2 uses it): average each element the device holds over itself and the peers that hold
  it too; elements only the device holds stay its own, and its structure never changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from p2pfed.learning.robust_fusion import masked_combine
from p2pfed.algorithms.safl.slimming import (KeepMasks, element_masks, factor_names, flat_element_masks,
                                             slim_masks)


@dataclass
class SubModel:
    """A pruned model in dense form: its keep masks and its parameter values (zero where pruned)."""

    masks: KeepMasks
    values: dict[str, torch.Tensor]
    _flat: dict[tuple[str, ...], torch.Tensor] = field(default_factory=dict, repr=False, compare=False)

    def flat_values(self, names: Sequence[str]) -> torch.Tensor:
        """The values of ``names`` end to end (``flat``), built once per names: every receiver of
        a message shares its decoded sub-model."""
        key = tuple(names)
        found = self._flat.get(key)
        if found is None:
            found = self._flat[key] = flat(self.values, names)
        return found


def flat(tensors: Mapping[str, torch.Tensor], names: Sequence[str]) -> torch.Tensor:
    """The tensors of ``names``, each flattened, end to end."""
    return torch.cat([tensors[n].detach().reshape(-1) for n in names])


def unflat(values: torch.Tensor, like: Mapping[str, torch.Tensor], names: Sequence[str]) -> dict[str, torch.Tensor]:
    """``flat``'s inverse: views of ``values`` shaped as ``like``'s tensors of ``names``."""
    parts = torch.split(values, [like[n].numel() for n in names])
    return {n: part.view(like[n].shape) for n, part in zip(names, parts, strict=True)}


def masked_mean(values: Sequence[Mapping[str, torch.Tensor]], holds: Sequence[Mapping[str, torch.Tensor]],
                weights: Sequence[float],
                names: Sequence[str]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Per element, the weighted mean over the models that hold it (0 where none does), and the
    total weight of those holders. Accumulated in float64 so peer order only affects rounding."""
    mean, weight = {}, {}
    for name in names:
        mean[name], weight[name] = _masked_mean([v[name] for v in values], [h[name] for h in holds], weights)
    return mean, weight


def _masked_mean(values: Sequence[torch.Tensor], holds: Sequence[torch.Tensor],
                 weights: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """``masked_mean`` of one tensor per model."""
    acc = torch.zeros(values[0].shape, dtype=torch.float64)
    wsum = torch.zeros_like(acc)
    for v, h, w in zip(values, holds, weights):
        hw = h.to(torch.float64) * float(w)
        acc += v.to(torch.float64) * hw
        wsum += hw
    return torch.where(wsum > 0, acc / wsum.clamp(min=1e-300), torch.zeros_like(acc)).float(), wsum


@dataclass
class RobustRule:
    """``algorithm.robust`` and its parameters for stage two, and the peer candidates it set aside."""

    rule: str
    trim_fraction: float = 0.2
    byzantine: int = 1
    select: int = 1
    clip_norm: float = 1.0
    set_aside: int = 0      # peer candidates (per group of elements with the same holders) set aside
    offered: int = 0        # peer candidates there were

    def combine(self, values: Sequence[dict[str, torch.Tensor]], holds: Sequence[dict[str, torch.Tensor]],
                weights: Sequence[float], names: Sequence[str]
                ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """``masked_mean``'s result with the rule's combination instead of the mean."""
        out, weight = {}, {}
        w = np.asarray(weights, dtype=np.float64)
        for name in names:
            shape = values[0][name].shape
            stacked = np.stack([v[name].detach().numpy().reshape(-1) for v in values])
            held = np.stack([h[name].numpy().reshape(-1) for h in holds])
            combined, left_out, offered = masked_combine(stacked, held, w, self.rule, trim_fraction=self.trim_fraction,
                                                byzantine=self.byzantine, select=self.select,
                                                clip_norm=self.clip_norm)
            self.set_aside += left_out
            self.offered += offered
            out[name] = torch.from_numpy(combined.reshape(shape)).float()
            weight[name] = torch.from_numpy((held * w[:, None]).sum(axis=0).reshape(shape))
        return out, weight


def overlap_counts(members: Sequence[SubModel]) -> list[np.ndarray]:
    """Per hidden layer, how many members keep each unit (Fig. 3, step 1)."""
    return [np.sum([m.masks[i] for m in members], axis=0) for i in range(len(members[0].masks))]


def fuse_cluster(model: nn.Module, members: Sequence[SubModel], rate: float) -> SubModel:
    """The cluster model of ``members`` (Fig. 3): units kept by most members survive up to
    ``rate`` (ties go to the larger mean |factor| among the holders: gate or BN scale), each
    element is the plain mean over the members holding it (Alg. 1 l.12: an unweighted mean
    within the cluster)."""
    counts = overlap_counts(members)
    gates = [np.mean([np.abs(m.values[name].numpy()) * m.masks[i] for m in members], axis=0)
             for i, name in enumerate(factor_names(model))]
    # Overlap first, mean factor magnitude second: scaled into one priority per unit.
    priority = [c + g / (1.0 + g.max(initial=0.0)) for c, g in zip(counts, gates)]
    masks = slim_masks(gates, rate, priority=priority)
    masks = [k & (c > 0) if (k & (c > 0)).any() else k for k, c in zip(masks, counts)]
    names = list(members[0].values)
    holds = [element_masks(model, m.masks) for m in members]
    mean, _ = masked_mean([m.values for m in members], holds, [1.0] * len(members), names)
    keep = element_masks(model, masks)
    return SubModel(masks, {n: torch.where(keep[n], mean[n], torch.zeros_like(mean[n])) for n in names})


@torch.no_grad()
def preserve_personal(model: nn.Module, own_masks: KeepMasks, own_weight: float,
                      peers: Sequence[tuple[SubModel, float]], names: Sequence[str],
                      robust: RobustRule | None = None) -> float:
    """Hermes-style aggregation into ``model`` over ``names``: every element the device's
    sub-model holds becomes the weighted mean over the device and the peers that hold it (or,
    with ``robust``, their robust combination: ``robust_fusion.masked_combine``); the rest
    stays. Returns the fraction of the device's held elements that some peer also held."""
    if not peers:
        return 0.0
    # every parameter of ``names`` end to end: one pass per member, whatever the number of parameters
    params = dict(model.named_parameters())
    own_holds = flat_element_masks(model, own_masks, names)
    holds = [own_holds] + [flat_element_masks(model, s.masks, names) & own_holds for s, _ in peers]
    values = [flat(params, names)] + [s.flat_values(names) for s, _ in peers]
    weights = [own_weight] + [w for _, w in peers]
    if robust is None:
        mean, weight = _masked_mean(values, holds, weights)
    else:   # the rule groups elements within a parameter: parameter by parameter
        by_name = robust.combine([unflat(v, params, names) for v in values],
                                 [unflat(h, params, names) for h in holds], weights, names)
        mean, weight = (flat(part, names) for part in by_name)
    new = unflat(torch.where(own_holds & (weight > 0), mean, values[0]), params, names)
    for n in names:
        params[n].copy_(new[n])
    by_peer = torch.zeros_like(own_holds)
    for h in holds[1:]:
        by_peer |= h
    held = int(own_holds.sum())
    return int(by_peer.sum()) / held if held else 0.0
