"""Layer-wise Relevance Propagation through the CNN (``learning/cnn.py``), for FedSub's LRP
extraction on convolutions (FedSub Eq. 3-5, applied per channel).

Each layer sends its output's relevance back to its input by the rule that fits it:
- a convolution with its batch norm, folded into one linear map (in evaluation mode batch norm
  is a per-channel scale and shift, so conv + BN is a convolution with scaled filters and a new
  bias): the alpha-beta rule (``alpha_beta.py``), biases absorbing none, as for dense layers;
- ReLU: relevance passes unchanged;
- 2-wide max pooling: each window's relevance goes to the position that won it;
- global average pooling: a channel's relevance is shared among its positions in proportion to
  their (non-negative) activations, the rule for a map whose weights are all positive.

All four conserve relevance (the first exactly where a unit has positive contributions, as the
dense rule), so a channel's relevance, its sum over positions, adds up across a layer to the
class score.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F
import torch.nn.grad
from torch import nn

from p2pfed.algorithms.fedsub.alpha_beta import alpha_beta
from p2pfed.learning.cnn import CNN


def _folded(conv: nn.Module, norm: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """The convolution's filters and bias with evaluation-mode batch norm folded in (as they are
    on a CNN without batch norm)."""
    conv_w, conv_b = conv.weight, conv.bias
    assert isinstance(conv_w, torch.Tensor) and isinstance(conv_b, torch.Tensor)
    if isinstance(norm, nn.Identity):
        return conv_w, conv_b
    assert isinstance(norm, nn.modules.batchnorm._BatchNorm)
    mean, var = norm.running_mean, norm.running_var
    assert mean is not None and var is not None
    scale = norm.weight / torch.sqrt(var + norm.eps)
    w = conv_w * scale.view(-1, *([1] * (conv_w.dim() - 1)))
    return w, (conv_b - mean) * scale + norm.bias


@torch.no_grad()
def cnn_relevances(model: CNN, x: torch.Tensor, target: torch.Tensor, alpha: float,
                   beta: float) -> list[torch.Tensor]:
    """Per-sample relevances ``[R_input, R_block0_channels, ..., R_output_units]`` of each
    sample's logit for ``target``, by the rules in the module doc (batch norm in evaluation mode)."""
    two_d = len(model.shape) == 3
    conv = F.conv2d if two_d else F.conv1d
    conv_input: Callable[..., torch.Tensor] = torch.nn.grad.conv2d_input if two_d else torch.nn.grad.conv1d_input
    pool, unpool = (F.max_pool2d, F.max_unpool2d) if two_d else (F.max_pool1d, F.max_unpool1d)
    h = x.reshape(x.shape[0], *model.shape)
    steps = []   # per block: its input, folded filters, padding, post-ReLU map, pooling indices
    for block, norm, pooled in model.blocks():
        w, b = _folded(block, norm)
        pad = int(cast(tuple[int, ...], block.padding)[0])
        r = torch.relu(conv(h, w, b, padding=pad))
        idx = None
        out = r
        if pooled:
            out, idx = pool(r, 2, return_indices=True)
        steps.append((h, w, pad, r, idx))
        h = out
    positions = tuple(range(2, h.dim()))
    features = h.mean(dim=positions)
    logits = model.head(features)
    rows = torch.arange(x.shape[0])
    rel = torch.zeros_like(logits)
    rel[rows, target] = logits[rows, target]
    out_rel = [rel]
    rel = alpha_beta(features, model.head.weight, rel, alpha, beta, lambda a, w: a @ w.T, lambda r, w: r @ w)
    out_rel.append(rel)                                   # the last block's channels
    total = h.sum(dim=positions, keepdim=True)
    share = torch.where(total > 0, h / total.clamp(min=1e-12), torch.zeros_like(h))
    rel_map = share * rel.view(*rel.shape, *([1] * len(positions)))
    for j in range(len(steps) - 1, -1, -1):
        a, w, pad, r, idx = steps[j]
        if idx is not None:
            rel_map = unpool(rel_map, idx, [2] * len(positions), output_size=list(r.shape[2:]))

        def forward(inp: torch.Tensor, weight: torch.Tensor, pad: int = pad) -> torch.Tensor:
            return conv(inp, weight, padding=pad)

        def backward(r_out: torch.Tensor, weight: torch.Tensor, shape: torch.Size = a.shape,
                     pad: int = pad) -> torch.Tensor:
            return conv_input(shape, weight, r_out, padding=pad)

        rel_map = alpha_beta(a, w, rel_map, alpha, beta, forward, backward)
        out_rel.append(rel_map.flatten(2).sum(dim=2) if j > 0 else rel_map.flatten(1))
    return out_rel[::-1]
