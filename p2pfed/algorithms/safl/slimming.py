"""Network Slimming on a model's units: rank the scaling factors, prune, keep pruned units out, recover.

Network Slimming (Liu et al., ICCV 2017, SAFL ref. [8]) trains per-channel scaling factors with
an L1 penalty and prunes the channels whose factors are smallest in magnitude, ranked over the
whole network. SAFL (Sec. III-B4, ``NetSlim``) prunes to the round's rate r_t that way, and
(Sec. III-B2, ``ModelRecover``) restores pruned units with factor 0 before the next training so
a unit pruned too early can come back.

The units are those of ``learning/units.py`` (``unit_layers``), the same code for every model
that has them; the classifier's units (the classes) are never pruned. A unit's scaling factor is

* on a CNN, its channel's batch-norm scale γ (the paper's Θ^BN): pruning sets the channel's γ
  and shift β to 0, so the channel's output ReLU(0) is 0 and the dense model computes exactly the
  sub-model without it; recovery gives β back (γ stays 0, as Sec. III-B2 sets the BN weights of
  pruned channels to zero). A channel back with γ = 0 outputs ReLU(β): with β > 0 the loss
  reaches its γ again; with β <= 0 it outputs 0, and only the guided pull (μ) toward a cluster
  whose γ for it is not 0 can bring it back;
* on the MLP (no batch norm), its unit gate (``MLP.add_unit_gates``), which multiplies the ReLU
  output: a gate of 0 removes the unit and still gets a gradient, so recovery has nothing to give back.

A structure is one boolean *keep mask* per hidden layer (its units: neurons or channels).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from p2pfed.learning.cnn import CNN
from p2pfed.learning.model import MLP
from p2pfed.learning.training import ExtraLoss
from p2pfed.learning.units import UnitLayer, unit_layers

KeepMasks = list[np.ndarray]  # one bool array per hidden layer, True where the unit is kept


def factor_params(model: nn.Module) -> list[tuple[str, str | None]]:
    """Per hidden layer, the parameter holding its units' scaling factors and the one holding the
    shift pruning zeroes with them (None: none): the MLP's ``gates.<i>``; a convolution block's
    batch-norm weight γ and bias β. These are the unit's "BN layer": local in stage two."""
    if isinstance(model, MLP):
        if model.gates is None:
            raise ValueError("the model has no unit gates (MLP.add_unit_gates)")
        return [(f"gates.{i}", None) for i in range(len(model.gates))]
    modules = dict(model.named_modules())
    out: list[tuple[str, str | None]] = []
    for i, layer in enumerate(unit_layers(model)[:-1]):
        norms = {n.rpartition(".")[0] for n in layer.params
                 if isinstance(modules.get(n.rpartition(".")[0]), _BatchNorm)}
        if not norms and isinstance(model, CNN):
            raise ValueError("model.options.batch_norm: SAFL prunes a CNN's channels by their batch-norm scales "
                             "(Network Slimming); this CNN has no batch norm: leave batch_norm at true")
        if len(norms) != 1:
            raise ValueError(f"{type(model).__name__}: hidden layer {i}'s units need one batch norm whose scale "
                             f"is their factor (Network Slimming), found {sorted(norms)}")
        norm = norms.pop()
        out.append((f"{norm}.weight", f"{norm}.bias"))
    return out


def factor_names(model: nn.Module) -> list[str]:
    """Per hidden layer, the parameter of its units' scaling factors (what NetSlim ranks)."""
    return [f for f, _ in factor_params(model)]


def local_names(model: nn.Module) -> list[str]:
    """The factors and shifts: what stays each device's own in stage two (FedBN-style)."""
    return [n for pair in factor_params(model) for n in pair if n is not None]


def gate_values(model: nn.Module) -> list[torch.Tensor]:
    """The model's scaling factors, detached, one tensor per hidden layer."""
    params = dict(model.named_parameters())
    return [params[n].detach() for n in factor_names(model)]


def full_masks(model: nn.Module) -> KeepMasks:
    """Every hidden unit kept."""
    return [np.ones(layer.size, dtype=bool) for layer in unit_layers(model)[:-1]]


def slim_masks(factors: Sequence[torch.Tensor] | Sequence[np.ndarray], rate: float,
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
    """Fraction of hidden units (a CNN's channels) pruned: the pruning rate a structure reaches."""
    total = sum(m.size for m in masks)
    return 1.0 - sum(int(m.sum()) for m in masks) / total if total else 0.0


def unit_rows(model: nn.Module, masks: KeepMasks) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Per layer (the classifier last), the units kept and the units of the layer before that its
    parameters read (None for the first layer: the inputs, never pruned)."""
    layers = unit_layers(model)
    rows = [np.asarray(m, dtype=bool) for m in masks] + [np.ones(layers[-1].size, dtype=bool)]
    return [(r, rows[i - 1] if i else None) for i, r in enumerate(rows)]


def reads_inputs(row_shape: tuple[int, ...], cols: np.ndarray | None) -> bool:
    """Whether a unit parameter's second dimension runs over the previous layer's units (a dense
    weight's columns, a convolution's input channels) rather than being per unit (bias, γ, β)."""
    if cols is None or not row_shape:
        return False
    if row_shape[0] != cols.size:
        raise ValueError(f"a unit parameter of row shape {row_shape} does not read the previous layer's "
                         f"{cols.size} units")
    return True


_ELEMENT_MASKS = "_p2pfed_safl_element_masks"   # the model's own memo of structures it has seen
_MEMO_LIMIT = 256


def element_masks(model: nn.Module, masks: KeepMasks) -> dict[str, torch.Tensor]:
    """Per parameter, True where the element belongs to the pruned sub-model: an element survives
    when its unit and (for weights reading the layer before) its input unit both do (inputs and
    classes are never pruned). The tensors are shared, read-only: a device fuses with the same
    few structures round after round, so each is built once per model layout."""
    layers = unit_layers(model)
    gated = isinstance(model, MLP) and model.gates is not None
    key = (tuple(layers), gated, tuple((len(m), np.packbits(np.asarray(m, dtype=bool)).tobytes()) for m in masks))
    memo = model.__dict__.setdefault(_ELEMENT_MASKS, {})
    found = memo.get(key)
    if found is None:
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        found = memo[key] = _element_masks(model, layers, masks, gated)
    return dict(found)


def flat_element_masks(model: nn.Module, masks: KeepMasks, names: Sequence[str]) -> torch.Tensor:
    """``element_masks`` of ``names``, end to end in one flat tensor (``flatten`` order), built
    once per structure and names, as ``element_masks`` is; shared, read-only."""
    memo = model.__dict__.setdefault(_ELEMENT_MASKS, {})
    structure = tuple((len(m), np.packbits(np.asarray(m, dtype=bool)).tobytes()) for m in masks)
    key = ("flat", tuple(unit_layers(model)), tuple(names), structure)
    found = memo.get(key)
    if found is None:
        by_name = element_masks(model, masks)
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        found = memo[key] = torch.cat([by_name[n].reshape(-1) for n in names])
    return cast(torch.Tensor, found)


def _element_masks(model: nn.Module, layers: Sequence[UnitLayer], masks: KeepMasks,
                   gated: bool) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for layer, (rows, cols) in zip(layers, unit_rows(model, masks)):
        r = torch.as_tensor(rows)
        for name, shape in zip(layer.params, layer.row_shapes):
            held = r.reshape(-1, *[1] * len(shape))
            if reads_inputs(shape, cols):
                held = held & torch.as_tensor(cols).reshape(1, -1, *[1] * (len(shape) - 1))
            out[name] = held.expand(layer.size, *shape).clone()
    if gated:
        for i, m in enumerate(masks):
            out[f"gates.{i}"] = torch.as_tensor(np.asarray(m, dtype=bool)).clone()
    return out


def kept_parameter_fraction(model: nn.Module, masks: KeepMasks) -> float:
    """Parameters of the pruned sub-model over the full model's: the model size kept."""
    kept = sum(int(m.sum()) for m in element_masks(model, masks).values())
    return kept / sum(p.numel() for p in model.parameters())


@torch.no_grad()
def zero_pruned_factors(model: nn.Module, masks: KeepMasks) -> dict[str, np.ndarray]:
    """NetSlim's cut: set the factors (and shifts) of pruned units to 0, which removes them from
    the function. Returns the shifts it zeroed (full size, 0 where kept), for ``recover_units``."""
    params = dict(model.named_parameters())
    shifts: dict[str, np.ndarray] = {}
    for (factor, shift), m in zip(factor_params(model), masks):
        keep = torch.as_tensor(np.asarray(m, dtype=bool), dtype=params[factor].dtype)
        params[factor].mul_(keep)
        if shift is not None:
            shifts[shift] = (params[shift].detach() * (1 - keep)).numpy().copy()
            params[shift].mul_(keep)
    return shifts


@torch.no_grad()
def recover_units(model: nn.Module, masks: KeepMasks, shifts: dict[str, np.ndarray]) -> None:
    """ModelRecover: the full model again, pruned units with factor 0 (where pruning left them)
    and their shift as it was before the cut (``zero_pruned_factors``' return)."""
    params = dict(model.named_parameters())
    for (_, shift), m in zip(factor_params(model), masks):
        if shift is not None and shift in shifts:
            pruned = torch.as_tensor(~np.asarray(m, dtype=bool))
            params[shift].copy_(torch.where(pruned, torch.as_tensor(shifts[shift]), params[shift]))


def sub_model_gradient_masks(model: nn.Module, masks: KeepMasks) -> dict[str, torch.Tensor]:
    """Gradient masks (``train_epochs``, ``TrainingJob``) that train the pruned sub-model only:
    pruned factors (and shifts) get no gradient, so they stay 0 (and with a zero factor the
    unit's incoming and outgoing weights get none either)."""
    params = dict(model.named_parameters())
    out: dict[str, torch.Tensor] = {}
    for pair, m in zip(factor_params(model), masks):
        for name in (n for n in pair if n is not None):
            out[name] = torch.as_tensor(np.asarray(m, dtype=bool), dtype=params[name].dtype)
    return out


def guided_sparsity_loss(lam: float, mu: float, guide: list[torch.Tensor] | None) -> ExtraLoss:
    """SAFL's guided-update penalty (Sec. III-B3): lam * sum_b ||g_b||_1 (Network Slimming's
    sparsity) + mu * sum_b ||g_b - g_b^cluster||_1 (pull toward the cluster's factors; dropped
    when there is no ``guide``), g_b the b-th layer's scaling factors (``factor_names``)."""
    names: list[str] = []

    def term(model: nn.Module, x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        if not names:
            names.extend(factor_names(model))
        params = dict(model.named_parameters())
        total = logits.new_zeros(())
        for i, name in enumerate(names):
            g = params[name]
            if lam:
                total = total + lam * g.abs().sum()
            if mu and guide is not None:
                total = total + mu * (g - guide[i]).abs().sum()
        return total

    return term
