"""The arithmetic a training step does, counted from the model's layer shapes.

A Linear layer of ``n_in`` inputs and ``n_out`` outputs does ``n_in * n_out`` multiply-adds per
sample forward; a convolution, for each output value, its input channels (per group) times its
kernel's size (counted by one forward pass of a zero sample, since the output size depends on
the input). Forward FLOPs are twice the multiply-adds, and a training step (forward and
backward, the backward about twice the forward) three times the forward: ``6 * MACs`` per sample
per epoch. Other layers (activations, norms, pooling) are not counted; a model with neither
Linear nor convolution layers is counted as one multiply-add per parameter, a rough stand-in.
"""

from __future__ import annotations

import math

import torch
from torch import nn

TRAINING_PER_FORWARD = 3.0     # forward + backward ~ 3x forward
FLOPS_PER_MAC = 2.0

_MACS: dict[tuple, float] = {}
CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def forward_macs(model: nn.Module, in_features: int | None = None) -> float:
    """Multiply-adds of one sample's forward pass (remembered per architecture and input width);
    ``in_features``: a sample's width, needed to size a model's convolutions."""
    key = (type(model), in_features, tuple((n, tuple(p.shape)) for n, p in model.named_parameters()))
    found = _MACS.get(key)
    if found is None:
        convolutions = [m for m in model.modules() if isinstance(m, CONVOLUTIONS)]
        if convolutions and in_features is not None:
            found = _measured_macs(model, in_features)
        else:
            linear = sum(float(m.in_features * m.out_features) for m in model.modules() if isinstance(m, nn.Linear))
            found = linear or float(sum(p.numel() for p in model.parameters()))
        _MACS[key] = found
    return found


def _measured_macs(model: nn.Module, in_features: int) -> float:
    """Linear and convolution multiply-adds of one zero sample's forward pass (evaluation mode, no
    gradients; the model's mode is restored)."""
    total = 0.0

    def count(module: nn.Module, _inputs: tuple, output: torch.Tensor) -> None:
        nonlocal total
        if isinstance(module, nn.Linear):
            total += float(module.in_features * module.out_features)
        else:
            conv = module
            assert isinstance(conv, CONVOLUTIONS)
            per_output = conv.in_channels // conv.groups * math.prod(conv.kernel_size)
            total += float(output.numel() * per_output)

    hooks = [m.register_forward_hook(count) for m in model.modules() if isinstance(m, (nn.Linear, *CONVOLUTIONS))]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, in_features))
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    return total


def training_flops(model: nn.Module, samples: int, epochs: int, in_features: int | None = None) -> float:
    """FLOPs of training ``model`` on ``samples`` samples (of ``in_features`` values) for ``epochs`` epochs."""
    return TRAINING_PER_FORWARD * FLOPS_PER_MAC * forward_macs(model, in_features) * samples * epochs
