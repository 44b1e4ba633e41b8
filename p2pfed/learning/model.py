"""The classifier every device trains: a plain ReLU MLP whose layers are listed in order.

FedSub's subnetworks, prototypes and relevance propagation all walk the layers one by one,
so the model exposes them as an ordered list of ``nn.Linear`` instead of hiding them in a
``Sequential`` with interleaved activations.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class MLP(nn.Module):
    """Linear → ReLU → … → Linear. The last hidden activation is the feature space of prototypes."""

    def __init__(self, in_features: int, hidden: Sequence[int], num_classes: int) -> None:
        super().__init__()
        sizes = [int(in_features), *[int(h) for h in hidden], int(num_classes)]
        if any(s <= 0 for s in sizes):
            raise ValueError(f"layer sizes must be positive, got {sizes}")
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    @property
    def num_classes(self) -> int:
        return self.layers[-1].out_features

    def activations(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Post-activation output of every layer (ReLU for hidden layers, logits for the last)."""
        outs = []
        h = x
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = torch.relu(h)
            outs.append(h)
        return outs

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate-layer representation f(x), the space prototypes live in."""
        h = x
        for layer in self.layers[:-1]:
            h = torch.relu(layer(h))
        return h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[-1](self.features(x))


def build_model(in_features: int, num_classes: int, hidden: Sequence[int], seed: int) -> MLP:
    """A freshly initialised MLP whose weights depend only on ``seed``."""
    gen_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return MLP(in_features, hidden, num_classes)
    finally:
        torch.random.set_rng_state(gen_state)


def parameters_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached views of the model's parameters by name (writes go through to the model)."""
    return {name: p.detach() for name, p in model.named_parameters()}


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
