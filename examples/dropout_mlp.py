"""A model of your own: an MLP with dropout, for ``model.name: dropout_mlp.py:make_model``.

p2pfed calls ``make_model(input_size, num_classes, generator, **model.options)`` on every device;
the initial weights come from ``generator`` (seeded alike on every device, as a server's first
broadcast would give them). ``features`` and ``head`` let the methods that need a representation
and a classifier (FedPer, FedRep, FedProto, ProtoHAR, FedAli, FedHome) use it; gossip averaging,
FedProx and Ditto need neither. Dropout draws from the device's own random stream while it trains.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class DropoutMLP(nn.Module):
    def __init__(self, input_size: int, num_classes: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(input_size, hidden), nn.ReLU(), nn.Dropout(dropout),
                                  nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout))
        self.head = nn.Linear(hidden, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def make_model(input_size: int, num_classes: int, generator: torch.Generator, hidden: int = 64,
               dropout: float = 0.2) -> nn.Module:
    model = DropoutMLP(input_size, num_classes, hidden, dropout)
    for layer in model.modules():
        if isinstance(layer, nn.Linear):   # PyTorch's default initialisation, drawn from ``generator``
            nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
            bound = 1 / math.sqrt(layer.in_features)
            nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return model
