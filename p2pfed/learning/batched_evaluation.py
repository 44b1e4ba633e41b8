"""Evaluating many devices' models at once: one stacked forward, one confusion computation.

Every device is scored at every evaluation point. One at a time, that is a small forward pass and
a small metric computation per device, each mostly per-call overhead. Here the MLPs (and CNNs)
that share an architecture run their test data as one stacked forward
(``batched_training.stacked_forward``; a CNN's batch norm statistics stacked too, read only in
evaluation mode; each device's test rows padded to the longest), and macro-F1, accuracy and loss of every device
come from one ``grouped_metrics`` / ``grouped_loss`` call over the stacked predictions.
``training.evaluate`` on one model stays the reference a test compares against (equal up to the
float rounding of the logits and of the loss's per-device sum).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from p2pfed.learning.batched_training import (GROUP_LIMIT, chunks, mlp_forward, stacked_forward,
                                              vmap_forward_with_buffers)
from p2pfed.learning.cnn import CNN
from p2pfed.learning.metrics import grouped_loss, grouped_metrics
from p2pfed.learning.model import MLP
from p2pfed.learning.training import Evaluation, evaluate, evaluation_mode


@torch.no_grad()
def evaluate_many(models: Sequence[nn.Module], xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor],
                  *, min_group: int = 2, limit: int = GROUP_LIMIT) -> list[Evaluation]:
    """``evaluate(models[i], xs[i], ys[i])`` for every i; MLPs (CNNs) of one architecture together,
    at most ``limit`` at a time (``batched_training.GROUP_LIMIT``)."""
    out: list[Evaluation | None] = [None] * len(models)
    groups: dict[tuple, list[int]] = {}
    for i, model in enumerate(models):
        if (isinstance(model, MLP) and not any(True for _ in model.buffers())) or type(model) is CNN:
            shapes = tuple((name, tuple(p.shape)) for name, p in model.named_parameters())
            gated = isinstance(model, MLP) and model.gates is not None
            groups.setdefault((type(model), gated, shapes, xs[i].dtype), []).append(i)
    for members in groups.values():
        if len(members) < min_group:
            continue
        for chunk in chunks(members, limit):
            for i, evaluation in zip(chunk, _evaluate_group([models[i] for i in chunk], [xs[i] for i in chunk],
                                                            [ys[i] for i in chunk]), strict=True):
                out[i] = evaluation
    return [evaluate(m, x, y) if e is None else e for m, x, y, e in zip(models, xs, ys, out)]


def _evaluate_group(models: Sequence[nn.Module], xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor]
                    ) -> list[Evaluation]:
    sizes = [int(x.shape[0]) for x in xs]
    longest = max(sizes)
    if longest == 0:
        return [evaluate(m, x, y) for m, x, y in zip(models, xs, ys)]
    per_model = [[p.detach() for p in m.parameters()] for m in models]
    names = [name for name, _ in models[0].named_parameters()]
    params = {name: torch.stack([own[k] for own in per_model]) for k, name in enumerate(names)}
    padded = xs[0].new_zeros((len(models), longest, xs[0].shape[1]))
    for d, x in enumerate(xs):
        padded[d, :x.shape[0]] = x
    buffer_names = [name for name, _ in models[0].named_buffers()]
    template = models[0]
    if type(template) is MLP and template.gates is None:   # grouped matmuls: no module runs, no mode to set
        logits = mlp_forward(template)(params, padded)
    else:
        logits = _module_forward(models, params, padded, buffer_names)
    valid = torch.arange(longest).unsqueeze(0) < torch.as_tensor(sizes).unsqueeze(1)
    logits = logits[valid]                               # rows in device order, then sample order
    y = torch.cat(list(ys))
    groups = torch.repeat_interleave(torch.arange(len(models)), torch.as_tensor(sizes))
    metrics = grouped_metrics(y, logits.argmax(dim=1), groups, len(models))
    loss = grouped_loss(logits, y, groups, len(models))
    return [Evaluation(f1_macro=float(metrics.f1_macro[d]), loss=float(loss[d]),
                       accuracy=float(metrics.accuracy[d]), f1_present=float(metrics.f1_present[d]))
            for d in range(len(models))]


def _module_forward(models: Sequence[nn.Module], params: dict[str, torch.Tensor], padded: torch.Tensor,
                    buffer_names: list[str]) -> torch.Tensor:
    """The group's logits through the models' own forward, in evaluation mode."""
    with evaluation_mode(models):
        if buffer_names:   # read, not updated, in evaluation mode
            per_buffers = [list(m.buffers()) for m in models]
            buffers = {name: torch.stack([own[k] for own in per_buffers]) for k, name in enumerate(buffer_names)}
            logits = vmap_forward_with_buffers(models[0])(params, buffers, padded)
        else:
            logits = stacked_forward(models[0])(params, padded)
    return logits
