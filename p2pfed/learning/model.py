"""The classifier every device trains: a plain ReLU MLP whose layers are listed in order.

FedSub's subnetworks, prototypes and relevance propagation all walk the layers one by one,
so the model exposes them as an ordered list of ``nn.Linear`` instead of hiding them in a
``Sequential`` with interleaved activations.

Optionally every hidden unit carries a scaling factor (a *unit gate*) that multiplies its ReLU
output: the per-channel factors Network Slimming ranks to prune (SAFL Sec. III-B4 uses the BN
weights of a CNN; an MLP has no channels, so one learnable factor per unit plays that part).
Gates start at 1, so adding them leaves the function unchanged; a gate of 0 removes the unit,
and because it multiplies the ReLU output (not its input) a gate at 0 still gets a gradient,
so a pruned unit can come back (SAFL's model recovery).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class MLP(nn.Module):
    """Linear → ReLU → … → Linear. The last hidden activation is the feature space of prototypes."""

    def __init__(self, in_features: int, hidden: Sequence[int], num_classes: int,
                 unit_gates: bool = False) -> None:
        super().__init__()
        sizes = [int(in_features), *[int(h) for h in hidden], int(num_classes)]
        if any(s <= 0 for s in sizes):
            raise ValueError(f"layer sizes must be positive, got {sizes}")
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.gates: nn.ParameterList | None = None
        if unit_gates:
            self.add_unit_gates()

    def add_unit_gates(self) -> None:
        """Give every hidden unit a scaling factor of 1 (parameters ``gates.<layer>``); idempotent."""
        if self.gates is None:
            self.gates = nn.ParameterList(nn.Parameter(torch.ones(layer.out_features))
                                          for layer in self.layers[:-1])

    def _hidden(self, i: int, h: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.layers[i](h))
        return h if self.gates is None else h * self.gates[i]

    @property
    def num_classes(self) -> int:
        return self.layers[-1].out_features

    def activations(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Post-activation output of every layer (ReLU for hidden layers, logits for the last)."""
        outs = []
        h = x
        for i in range(len(self.layers) - 1):
            h = self._hidden(i, h)
            outs.append(h)
        outs.append(self.layers[-1](h))
        return outs

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate-layer representation f(x), the space prototypes live in."""
        h = x
        for i in range(len(self.layers) - 1):
            h = self._hidden(i, h)
        return h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[-1](self.features(x))


def build_model(in_features: int, num_classes: int, hidden: Sequence[int], seed: int,
                unit_gates: bool = False) -> MLP:
    """A freshly initialised MLP whose weights depend only on ``seed`` (gates, if any, start at 1)."""
    gen_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return MLP(in_features, hidden, num_classes, unit_gates=unit_gates)
    finally:
        torch.random.set_rng_state(gen_state)


def parameters_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached views of the model's parameters by name (writes go through to the model)."""
    return {name: p.detach() for name, p in model.named_parameters()}


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
