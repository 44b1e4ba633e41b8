"""``model.name: cnn`` — a small convolutional family with batch norm, for images and sensor windows.

The rows a device holds are flat (``dataset`` gives every sample as one feature vector), so the
network first views each row as ``shape``: ``[channels, height, width]`` for images (2-D
convolutions; 8×8 digits are ``[1, 8, 8]``), ``[axes, time]`` for windowed sensor data (1-D
convolutions over time, e.g. a user's ``.npz`` of windows × axes × time flattened per window).
Without ``shape``, a square input is one-channel 2-D and anything else one-channel 1-D.

Each block is a convolution (``kernel``, same padding), batch norm and ReLU; a 2-wide max
pooling follows while the spatial size allows; global average pooling then gives the features
(``features(x)``: one value per channel of the last block) and a ``Linear`` head the logits, so
body/head methods (FedPer, FedRep) and prototype methods find what they need. Batch norm's
running statistics are buffers, not parameters: the methods that average parameters keep them
per device (as FedBN does), and checkpoints carry them. ``batch_norm: false`` leaves batch norm
out (an identity takes its place, so the blocks keep their layout): SAFL's paper runs its FedAvg
baseline on such a CNN (Sec. IV-C).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn


def default_shape(in_features: int) -> list[int]:
    """One-channel 2-D for a square input, one-channel 1-D otherwise."""
    side = math.isqrt(in_features)
    return [1, side, side] if side * side == in_features else [1, in_features]


class CNN(nn.Module):
    """Conv–BN–ReLU blocks (with 2-wide max pooling while the size allows), global average
    pooling, a linear head; input rows are flat and viewed as ``shape``."""

    def __init__(self, in_features: int, num_classes: int, shape: Sequence[int], channels: Sequence[int],
                 kernel: int, batch_norm: bool = True) -> None:
        super().__init__()
        if math.prod(shape) != in_features:
            raise ValueError(f"model.options.shape {list(shape)} holds {math.prod(shape)} values, but a sample "
                             f"has {in_features} features")
        if len(shape) not in (2, 3):
            raise ValueError(f"model.options.shape must be [channels, time] (1-D) or [channels, height, width] "
                             f"(2-D), got {list(shape)}")
        if not channels or any(c <= 0 for c in channels) or kernel <= 0 or kernel % 2 == 0:
            raise ValueError("model.options: channels must be positive sizes and kernel a positive odd size, "
                             f"got channels {list(channels)}, kernel {kernel}")
        self.shape = tuple(int(s) for s in shape)
        two_d = len(shape) == 3
        conv, norm, pool = ((nn.Conv2d, nn.BatchNorm2d, nn.MaxPool2d) if two_d
                            else (nn.Conv1d, nn.BatchNorm1d, nn.MaxPool1d))
        blocks: list[nn.Module] = []
        self.block_at: list[tuple[int, bool]] = []   # per block: index of its convolution in body, pooled?
        size, width = min(self.shape[1:]), self.shape[0]
        for out in channels:
            self.block_at.append((len(blocks), size >= 4))
            blocks += [conv(width, out, kernel, padding=kernel // 2), norm(out) if batch_norm else nn.Identity(),
                       nn.ReLU()]
            if size >= 4:
                blocks.append(pool(2))
                size //= 2
            width = out
        self.body = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1) if two_d else nn.AdaptiveAvgPool1d(1)
        self.head = nn.Linear(width, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The penultimate features: one value per channel of the last block."""
        return self.pool(self.body(x.reshape(x.shape[0], *self.shape))).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def blocks(self) -> list[tuple[nn.Conv1d | nn.Conv2d, nn.BatchNorm1d | nn.BatchNorm2d | nn.Identity, bool]]:
        """Each block's convolution, batch norm (an identity without), and whether a 2-wide max
        pooling follows it."""
        return [(self.body[at], self.body[at + 1], pooled) for at, pooled in self.block_at]  # type: ignore[misc]

    def unit_layer_params(self) -> list[tuple[str, ...]]:
        """A block's units are its channels: the rows of its filter, bias and batch norm's scale
        and shift (if it has one); the head's are its classes (``learning/units.py``)."""
        return [*(tuple(f"body.{i}.{name}" for i in (at, at + 1) for name in ("weight", "bias")
                        if isinstance(getattr(self.body[i], name, None), nn.Parameter))
                  for at, _ in self.block_at), ("head.weight", "head.bias")]

    def unit_activations(self, x: torch.Tensor) -> list[torch.Tensor]:
        """A channel's activation is its block's output (after ReLU and pooling: what the next
        layer reads) averaged over positions; the last block's are the features, the head's the logits."""
        h, outs = x.reshape(x.shape[0], *self.shape), []
        for at, pooled in self.block_at:
            h = self.body[at + 2](self.body[at + 1](self.body[at](h)))
            if pooled:
                h = self.body[at + 3](h)
            outs.append(h.flatten(2).mean(dim=2))
        return [*outs, self.head(outs[-1])]


def make_cnn(in_features: int, num_classes: int, generator: torch.Generator, *, shape: Sequence[int] | None = None,
             channels: Sequence[int] = (16, 32), kernel: int = 3, batch_norm: bool = True) -> CNN:
    """``model.name: cnn``'s factory (``model.options``: ``shape``, ``channels``, ``kernel``,
    ``batch_norm``); its initial weights come from the seeded global generator ``build_user_model`` sets."""
    if not isinstance(batch_norm, bool):
        raise ValueError(f"model.options.batch_norm must be true or false, got {batch_norm!r}")
    return CNN(in_features, num_classes, list(shape) if shape is not None else default_shape(in_features),
               list(channels), kernel, batch_norm)
