"""Network Slimming on the MLP's unit gates: rank, prune, keep pruned units at zero, recover.

Network Slimming (Liu et al., ICCV 2017, SAFL ref. [8]) trains per-channel scaling factors with
an L1 penalty and prunes the channels whose factors are smallest in magnitude, ranked over the
whole network. SAFL (Sec. III-B4, ``NetSlim``) prunes to the round's rate r_t that way, and
(Sec. III-B2, ``ModelRecover``) restores pruned units with factor 0 before the next training so
a unit pruned too early can come back. Here a unit's factor is its gate (``MLP.add_unit_gates``);
a structure is one boolean *keep mask* per hidden layer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

import numpy as np
import torch
from torch import nn

from p2pfed.learning.model import MLP
from p2pfed.learning.training import ExtraLoss

KeepMasks = list[np.ndarray]  # one bool array per hidden layer, True where the unit is kept


def gate_values(model: MLP) -> list[torch.Tensor]:
    """The model's unit gates, detached, one tensor per hidden layer."""
    if model.gates is None:
        raise ValueError("the model has no unit gates (MLP.add_unit_gates)")
    return [g.detach() for g in model.gates]


def full_masks(model: MLP) -> KeepMasks:
    """Every hidden unit kept."""
    return [np.ones(layer.out_features, dtype=bool) for layer in model.layers[:-1]]


def slim_masks(factors: list[torch.Tensor] | list[np.ndarray], rate: float,
               priority: list[np.ndarray] | None = None) -> KeepMasks:
    """Keep masks that prune round(rate * units) hidden units, the smallest by ``priority`` first.

    ``priority`` defaults to |factor| (Network Slimming); ranking is global over all hidden layers,
    ties broken by layer then index so the result is deterministic. Every layer keeps at least
    its highest-priority unit, so the network never falls apart.
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"pruning rate must be in [0, 1), got {rate}")
    scores = priority if priority is not None else [np.abs(np.asarray(f, dtype=np.float64)) for f in factors]
    sizes = [len(s) for s in scores]
    flat = np.concatenate(scores)
    layer_of = np.repeat(np.arange(len(sizes)), sizes)
    index_in = np.concatenate([np.arange(n) for n in sizes])
    order = np.lexsort((index_in, layer_of, flat))           # smallest priority first
    protected = {(li, int(np.argmax(s))) for li, s in enumerate(scores)}
    to_prune = int(round(rate * flat.size))
    keep = [np.ones(n, dtype=bool) for n in sizes]
    for pos in order:
        if to_prune == 0:
            break
        li, ui = int(layer_of[pos]), int(index_in[pos])
        if (li, ui) in protected:
            continue
        keep[li][ui] = False
        to_prune -= 1
    return keep


def pruned_fraction(masks: KeepMasks) -> float:
    """Fraction of hidden units pruned: the pruning rate a structure reaches."""
    total = sum(m.size for m in masks)
    return 1.0 - sum(int(m.sum()) for m in masks) / total if total else 0.0


def element_masks(model: MLP, masks: KeepMasks) -> dict[str, torch.Tensor]:
    """Per parameter, True where the element belongs to the pruned sub-model: a weight survives
    when its output unit and its input unit both do (inputs and outputs are never pruned)."""
    rows = [torch.as_tensor(np.asarray(m, dtype=bool)) for m in masks] + [
        torch.ones(model.layers[-1].out_features, dtype=torch.bool)]
    cols = [torch.ones(model.layers[0].in_features, dtype=torch.bool)] + rows[:-1]
    out: dict[str, torch.Tensor] = {}
    for i, layer in enumerate(model.layers):
        out[f"layers.{i}.weight"] = rows[i].unsqueeze(1) & cols[i].unsqueeze(0)
        out[f"layers.{i}.bias"] = rows[i].clone()
    if model.gates is not None:
        for i in range(len(masks)):
            out[f"gates.{i}"] = rows[i].clone()
    return out


def kept_parameter_fraction(model: MLP, masks: KeepMasks) -> float:
    """Parameters of the pruned sub-model over the full model's: the model size kept."""
    kept = sum(int(m.sum()) for m in element_masks(model, masks).values())
    return kept / sum(p.numel() for p in model.parameters())


@torch.no_grad()
def zero_pruned_gates(model: MLP, masks: KeepMasks) -> None:
    """Set the factors of pruned units to 0, which removes them from the function."""
    assert model.gates is not None   # SAFL's MLP has unit gates
    for g, m in zip(model.gates, masks):
        g.mul_(torch.as_tensor(np.asarray(m, dtype=bool), dtype=g.dtype))


@contextmanager
def pruned_units_frozen(model: MLP, masks: KeepMasks) -> Iterator[None]:
    """Train the pruned sub-model only: pruned gates get no gradient, so they stay 0 (and with a
    zero gate the unit's incoming and outgoing weights get none either)."""
    assert model.gates is not None   # SAFL's MLP has unit gates
    hooks = [g.register_hook(lambda grad, keep=torch.as_tensor(np.asarray(m, dtype=bool), dtype=g.dtype): grad * keep)
             for g, m in zip(model.gates, masks)]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


def guided_sparsity_loss(lam: float, mu: float, guide: list[torch.Tensor] | None) -> ExtraLoss:
    """SAFL's guided-update penalty (Sec. III-B3): lam * sum_b ||g_b||_1 (Network Slimming's
    sparsity) + mu * sum_b ||g_b - g_b^cluster||_1 (pull toward the cluster's factors; dropped
    when there is no ``guide``)."""

    def term(model: nn.Module, x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        total = logits.new_zeros(())
        for i, g in enumerate(cast(nn.ParameterList, model.gates)):   # SAFL's MLP, with unit gates
            if lam:
                total = total + lam * g.abs().sum()
            if mu and guide is not None:
                total = total + mu * (g - guide[i]).abs().sum()
        return total

    return term
