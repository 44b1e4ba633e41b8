"""Extra loss terms added to the local cross-entropy (``train_epochs(extra_loss=...)``).

Proximal terms pull the weights toward an anchor model (FedProx, Ditto); the prototype term
pulls each sample's feature toward its class's averaged prototype (FedProto, ProtoHAR).
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from p2pfed.learning.training import ExtraLoss


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the parameters, by name: the anchor of a proximal term."""
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def proximal_loss(anchor: dict[str, torch.Tensor], mu: float) -> ExtraLoss:
    """(mu / 2) * ||w - anchor||^2 over the anchored parameters (FedProx Eq. 2, Ditto Eq. 2)."""

    def term(model: nn.Module, x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        sq = sum(((p - anchor[name]) ** 2).sum() for name, p in model.named_parameters()
                 if name in anchor)
        return cast(torch.Tensor, 0.5 * mu * sq)

    return term


def prototype_loss(prototypes: torch.Tensor, known: torch.Tensor, weight: float) -> ExtraLoss:
    """weight * mean squared distance between f(x) and the prototype of x's class (FedProto Eq. 6).

    ``prototypes`` is (num_classes, d); ``known`` marks the classes that have one, and samples
    of other classes add nothing.
    """

    def term(model: nn.Module, x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        sel = known[y]
        if not bool(sel.any()):
            return logits.new_zeros(())
        feats = cast(Any, model).features(x[sel])   # the MLP's, or a user model's ``features``
        return weight * F.mse_loss(feats, prototypes[y[sel]])

    return term
