"""The arithmetic a training step does, counted from the model's layer shapes.

A Linear layer of ``n_in`` inputs and ``n_out`` outputs does ``n_in * n_out`` multiply-adds per
sample forward. Forward FLOPs are twice the multiply-adds, and a training step (forward and
backward, the backward about twice the forward) three times the forward: ``6 * MACs`` per sample
per epoch. Other layers (activations, norms, convolutions) are not counted; a model without any
Linear layer is counted as one multiply-add per parameter, a rough stand-in.
"""

from __future__ import annotations

from torch import nn

TRAINING_PER_FORWARD = 3.0     # forward + backward ~ 3x forward
FLOPS_PER_MAC = 2.0

_MACS: dict[tuple, float] = {}


def forward_macs(model: nn.Module) -> float:
    """Multiply-adds of one sample's forward pass (remembered per architecture)."""
    key = (type(model), tuple((n, tuple(p.shape)) for n, p in model.named_parameters()))
    found = _MACS.get(key)
    if found is None:
        linear = sum(float(m.in_features * m.out_features) for m in model.modules() if isinstance(m, nn.Linear))
        found = _MACS[key] = linear or float(sum(p.numel() for p in model.parameters()))
    return found


def training_flops(model: nn.Module, samples: int, epochs: int) -> float:
    """FLOPs of training ``model`` on ``samples`` samples for ``epochs`` epochs."""
    return TRAINING_PER_FORWARD * FLOPS_PER_MAC * forward_macs(model) * samples * epochs
