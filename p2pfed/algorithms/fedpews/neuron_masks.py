"""Unit-level masks of a model and training of the masked model (FedPeWS poster).

The poster's mask generation function G maps neuron-level scores s (one per hidden unit, h of
them, h ≪ d) to parameter-level binary masks in three steps: θ = σ(s), m̃ ~ Bernoulli(θ), and
m = the parameter mask of m̃. The units are those of ``learning/units.py``: an MLP's hidden
neurons, a CNN's conv-block channels (a channel is the CNN's neuron: one filter, its bias and its
batch norm's scale and shift); the classifier's units (classes) and the inputs are always kept.
A parameter row of a unit (its weight row or filter, its bias, its batch norm's scale and shift)
is kept when the unit is, and within a weight row or filter the entries that read a dropped unit
of the previous layer (a column, an input channel) are dropped too; so the mask marks exactly the
parameters that a subnetwork uses and trains. A dropped channel outputs zero in training (its
filter, bias and batch-norm shift are masked) and its running statistics are buffers the device
keeps. Training uses the straight-through estimator: the forward pass sees the sampled binary
mask, the backward pass treats ∂m̃/∂θ as 1, so the scores get a gradient from the task loss.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from p2pfed.learning.training import TrainingConfig, make_adam
from p2pfed.learning.units import UnitLayer, unit_layers

UnitMasks = list[torch.Tensor]     # one mask per hidden layer (bool, or float under the STE)
ParamMasks = dict[str, torch.Tensor]


def hidden_sizes(model: nn.Module) -> list[int]:
    """Units per hidden layer (every unit layer but the classifier): the neurons or channels
    that scores and masks are defined on."""
    return [layer.size for layer in unit_layers(model)[:-1]]


def layer_keeps(model: nn.Module, units: Sequence[torch.Tensor],
                ones: Callable[[int], torch.Tensor]) -> tuple[list[UnitLayer], list[torch.Tensor]]:
    """The unit layers, and what each layer's rows read and hold: ``keep[i]`` masks the inputs of
    unit layer i (its weight's second dimension; all kept for the first layer), ``keep[i + 1]``
    its units (all kept for the classifier)."""
    layers = unit_layers(model)
    sizes = [layer.size for layer in layers[:-1]]
    if [int(u.shape[0]) for u in units] != sizes:
        raise ValueError(f"unit masks of sizes {[int(u.shape[0]) for u in units]}, model has {sizes}")
    inputs = next((shape[0] for shape in layers[0].row_shapes if shape), None)
    if inputs is None:
        raise ValueError(f"the first unit layer's parameters {layers[0].params} read no inputs")
    for i, layer in enumerate(layers[1:]):
        for name, shape in zip(layer.params, layer.row_shapes):
            if shape and shape[0] != sizes[i]:
                raise ValueError(f"{name} reads {shape[0]} inputs, the layer before has {sizes[i]} units")
    return layers, [ones(inputs), *units, ones(layers[-1].size)]


def _row_mask(rows: torch.Tensor, cols: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """A parameter's mask: row r kept with unit r; in a weight or filter, column c with input c."""
    if len(shape) == 1:
        return rows
    out = rows.view(-1, *[1] * (len(shape) - 1)) * cols.view(1, -1, *[1] * (len(shape) - 2))
    return out.expand(shape)


def parameter_masks(model: nn.Module, units: Sequence[torch.Tensor]) -> ParamMasks:
    """The last step of G: unit masks → parameter masks shaped like every parameter.

    A unit's rows (weight row or filter, bias, batch norm's scale and shift) are kept with it,
    and within them the entries reading a dropped unit of the layer before (``layer_keeps``).
    Parameters outside the unit layers are all kept. Float masks (straight-through) stay
    differentiable; bool masks give bool masks.
    """
    layers, keep = layer_keeps(model, [u.to(torch.float32) for u in units], torch.ones)
    out: ParamMasks = {}
    for i, layer in enumerate(layers):
        for name, row_shape in zip(layer.params, layer.row_shapes):
            out[name] = _row_mask(keep[i + 1], keep[i], (layer.size, *row_shape))
    for name, p in model.named_parameters():
        if name not in out:
            out[name] = torch.ones(p.shape)
    if all(u.dtype == torch.bool for u in units):
        out = {k: v > 0 for k, v in out.items()}
    return out


def sample_units(scores: Sequence[torch.Tensor], generator: torch.Generator) -> list[torch.Tensor]:
    """m̃ ~ Bernoulli(σ(s)), one draw per hidden unit, from the device's own random stream."""
    with torch.no_grad():
        return [torch.bernoulli(torch.sigmoid(s), generator=generator).bool() for s in scores]


def straight_through(units: Sequence[torch.Tensor], scores: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The sampled masks in the forward pass, gradient to σ(s) as if m̃ were θ (STE)."""
    out = []
    for u, s in zip(units, scores):
        theta = torch.sigmoid(s)
        out.append(u.to(theta.dtype) + theta - theta.detach())
    return out


def masked_forward(model: nn.Module, masks: ParamMasks, x: torch.Tensor) -> torch.Tensor:
    """The model's output with every parameter multiplied by its mask (x ⊙ m)."""
    params = {name: p * masks[name].to(p.dtype) for name, p in model.named_parameters()}
    return cast(torch.Tensor, functional_call(model, params, (x,)))


@torch.no_grad()
def masked_copy(model: nn.Module, masks: ParamMasks) -> nn.Module:
    """A copy of the model whose parameters are x ⊙ m (what a subnetwork computes)."""
    masked = copy.deepcopy(model)
    for name, p in masked.named_parameters():
        p.mul_(masks[name].to(p.dtype))
    return masked


ScorePenalty = Callable[[list[torch.Tensor]], torch.Tensor]  # θ per layer → a scalar added to L_s


def train_subnetwork(model: nn.Module, units: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                     config: TrainingConfig, generator: torch.Generator, *,
                     scores: Sequence[torch.Tensor] | None = None, score_lr: float = 0.0,
                     score_penalty: ScorePenalty | None = None) -> float:
    """Mini-batch SGD on the masked model f(x ⊙ G(s)) for ``config.epochs``; returns the mean loss.

    ``units`` is the round's binary neuron mask. With ``scores`` (leaf tensors) the mask is
    learned too: each batch, one backward pass of L_s = CE + ``score_penalty``(σ(s)) gives the
    weights their gradient of L_x = CE (the penalty does not involve them; masked weights get
    zero gradient, so only the subnetwork moves) and the scores theirs through the
    straight-through estimator; weights step with ``config``'s optimiser (SGD or Adam) at ``config.lr``,
    scores by SGD at ``score_lr``.
    """
    n = int(x.shape[0])
    if n == 0:
        return float("nan")
    opt: torch.optim.Optimizer = (
        make_adam(model.parameters(), config) if config.optimizer == "adam" else
        torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay))
    learned = list(scores) if scores is not None else []
    for s in learned:
        s.requires_grad_(True)
    score_opt = torch.optim.SGD(learned, lr=score_lr) if learned else None
    fixed = parameter_masks(model, [u.bool() for u in units])
    model.train()
    losses = []
    try:
        for _ in range(config.epochs):
            order = torch.randperm(n, generator=generator)
            for start in range(0, n, config.batch_size):
                idx = order[start:start + config.batch_size]
                masks = parameter_masks(model, straight_through(units, learned)) if learned else fixed
                loss = F.cross_entropy(masked_forward(model, masks, x[idx]), y[idx])
                total = loss
                if learned and score_penalty is not None:
                    total = loss + score_penalty([torch.sigmoid(s) for s in learned])
                opt.zero_grad(set_to_none=True)
                if score_opt is not None:
                    score_opt.zero_grad(set_to_none=True)
                total.backward()   # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
                opt.step()
                if score_opt is not None:
                    score_opt.step()
                losses.append(float(loss.detach()))
    finally:
        for s in learned:
            s.requires_grad_(False)
            s.grad = None
    return float(np.mean(losses)) if losses else float("nan")


def fixed_units(sizes: Sequence[int], groups: int, group: int, shared_fraction: float) -> list[torch.Tensor]:
    """FedPeWS-Fixed's predefined subnetwork of ``group`` (of ``groups``): in every hidden layer
    the first ``shared_fraction`` of the units are kept by all groups, the rest are split into
    ``groups`` contiguous blocks and the group keeps its own block (disjoint apart from the
    shared units)."""
    if not 0 <= group < groups:
        raise ValueError(f"group {group} outside 0..{groups - 1}")
    out = []
    for n in sizes:
        shared = int(round(shared_fraction * n))
        block = np.array_split(np.arange(shared, n), groups)[group]
        keep = torch.zeros(n, dtype=torch.bool)
        keep[:shared] = True
        keep[torch.as_tensor(block, dtype=torch.int64)] = True
        out.append(keep)
    return out


def jaccard(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """|a ∩ b| / |a ∪ b| over all hidden units (1.0 when both are empty)."""
    ua, ub = torch.cat([u.bool() for u in a]), torch.cat([u.bool() for u in b])
    union = int((ua | ub).sum())
    return 1.0 if union == 0 else int((ua & ub).sum()) / union


@torch.no_grad()
def average_where_held(model: nn.Module,
                       members: Sequence[tuple[dict[str, torch.Tensor], ParamMasks | None, float]]) -> None:
    """Set each parameter to the weighted mean of the members' values over the members whose
    mask holds it (``None``: a member holds every parameter); a parameter no member with a
    positive weight holds keeps its value. Accumulates in float64, members in the given order."""
    for name, p in model.named_parameters():
        num = torch.zeros(p.shape, dtype=torch.float64)
        den = torch.zeros(p.shape, dtype=torch.float64)
        for values, masks, weight in members:
            v = values[name].to(torch.float64) * weight
            if masks is None:
                num += v
                den += weight
            else:
                held = masks[name]
                num += torch.where(held, v, 0.0)
                den += held.to(torch.float64) * weight
        p.copy_(torch.where(den > 0, num / torch.where(den > 0, den, 1.0), p.to(torch.float64)).to(p.dtype))
