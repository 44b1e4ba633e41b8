"""Class-level subnetworks: which units of each layer matter for a class (FedSub Sec. 3.1).

A subnetwork is stored as one boolean *unit mask* per layer (length = that layer's output
units). Keeping a unit keeps its incoming weights and its bias (FedSub Eq. 2 and Eq. 4), so the
parameter masks follow from the unit masks; storing units keeps artifacts small on the wire.
A unit is what ``learning/units.py`` says: a dense layer's neuron, or a convolution's output
channel (its filter, bias and batch-norm scale and shift), whose activation is its mean over
positions and whose relevance is its sum over positions (``lrp_conv.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from torch import nn

from p2pfed.algorithms.fedsub.alpha_beta import alpha_beta
from p2pfed.algorithms.fedsub.lrp_conv import cnn_relevances
from p2pfed.learning.cnn import CNN
from p2pfed.learning.model import MLP
from p2pfed.learning.units import unit_activations

UnitMasks = list[np.ndarray]  # one bool array per layer, shape (out_features,)


@torch.no_grad()
def naive_unit_masks(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                     classes: np.ndarray) -> dict[int, UnitMasks]:
    """Naive activation rule (FedSub Eq. 2): keep the units whose mean activation on the class is > 0.

    Hidden units are measured after ReLU, output units on their logits (identity activation).
    """
    model.eval()
    acts = unit_activations(model, x)
    classes_t = torch.as_tensor(np.asarray(classes), dtype=y.dtype)
    # Every class's mean activation in one pass: (classes x samples) one-hot weights / counts.
    member = (y.unsqueeze(0) == classes_t.unsqueeze(1)).to(torch.float64)
    mean = member / member.sum(dim=1, keepdim=True).clamp(min=1)
    kept = [(mean @ a.to(torch.float64) > 0).numpy() for a in acts]
    return {int(c): [k[j] for k in kept] for j, c in enumerate(classes.tolist())}


def lrp_relevances(model: nn.Module, x: torch.Tensor, target: torch.Tensor, alpha: float,
                   beta: float) -> list[torch.Tensor]:
    """Layer-wise Relevance Propagation with the alpha-beta rule (FedSub Eq. 3-5).

    Starts from each sample's logit for ``target`` (the class score) and propagates it back
    layer by layer: a unit's relevance is shared among its inputs in proportion to their positive
    contributions (weighted by ``alpha``) minus their negative contributions (weighted by
    ``beta``), with ``alpha - beta = 1`` so relevance is conserved. Biases are not given
    relevance (they absorb none), which keeps the conservation exact.

    Returns per-sample relevances ``[R_input, R_layer0_units, ..., R_output_units]``; on a CNN a
    channel's relevance is its sum over positions (``lrp_conv.py``).
    """
    if abs((alpha - beta) - 1.0) > 1e-9:
        raise ValueError(f"LRP alpha-beta needs alpha - beta = 1, got alpha={alpha}, beta={beta}")
    if isinstance(model, CNN):
        return cnn_relevances(model, x, target, alpha, beta)
    if not isinstance(model, MLP):
        raise TypeError(f"LRP walks the MLP's or the CNN's layers, not a {type(model).__name__}")
    with torch.no_grad():
        acts = model.activations(x)
        inputs = [x, *acts[:-1]]
        logits = acts[-1]
        rel = torch.zeros_like(logits)
        rows = torch.arange(x.shape[0])
        rel[rows, target] = logits[rows, target]
        out = [rel]
        for layer, a in zip(reversed(model.layers), reversed(inputs)):
            rel = _alpha_beta_step(a, layer.weight, rel, alpha, beta)
            out.append(rel)
    return out[::-1]


def _alpha_beta_step(a: torch.Tensor, w: torch.Tensor, rel: torch.Tensor, alpha: float,
                     beta: float) -> torch.Tensor:
    """One dense layer of the alpha-beta rule (``alpha_beta`` with a matrix product)."""
    return alpha_beta(a, w, rel, alpha, beta, lambda a, w: a @ w.T, lambda r, w: r @ w)


def lrp_unit_masks(alpha: float, beta: float) -> Extractor:
    """LRP extraction (FedSub Eq. 4): keep the units whose mean relevance for the class is > 0."""

    def extract(model: nn.Module, x: torch.Tensor, y: torch.Tensor, classes: np.ndarray) -> dict[int, UnitMasks]:
        masks: dict[int, UnitMasks] = {}
        for c in classes.tolist():
            xc = x[y == c]
            rel = lrp_relevances(model, xc, torch.full((xc.shape[0],), int(c)), alpha, beta)
            masks[int(c)] = [(r.mean(dim=0) > 0).numpy() for r in rel[1:]]
        return masks

    return extract


Extractor = Callable[[nn.Module, torch.Tensor, torch.Tensor, np.ndarray], dict[int, UnitMasks]]

EXTRACTORS: dict[str, Extractor] = {
    "naive": naive_unit_masks,
    "lrp-a1b0": lrp_unit_masks(alpha=1.0, beta=0.0),
    "lrp-a2b1": lrp_unit_masks(alpha=2.0, beta=1.0),
}


def extract_unit_masks(method: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                       classes: np.ndarray) -> dict[int, UnitMasks]:
    """Per-class unit masks by the named extraction rule."""
    try:
        extractor = EXTRACTORS[method]
    except KeyError:
        raise ValueError(f"unknown subnetwork extraction {method!r}; "
                         f"choose one of {sorted(EXTRACTORS)}") from None
    return extractor(model, x, y, classes)


def parameter_masks(model: MLP, units: UnitMasks) -> dict[str, torch.Tensor]:
    """Expand per-layer unit masks to boolean masks shaped like each weight and bias."""
    out: dict[str, torch.Tensor] = {}
    for i, (layer, u) in enumerate(zip(model.layers, units)):
        ut = torch.from_numpy(np.array(u, dtype=bool))   # a copy: decoded masks are read-only views
        out[f"layers.{i}.weight"] = ut.unsqueeze(1).expand_as(layer.weight).clone()
        out[f"layers.{i}.bias"] = ut.clone()
    return out


def union_units(per_class: dict[int, UnitMasks]) -> UnitMasks:
    """Units kept by at least one class: the rows a device has to put on the wire once."""
    masks = list(per_class.values())
    if not masks:
        return []
    return [np.logical_or.reduce([m[i] for m in masks]) for i in range(len(masks[0]))]
