"""Stochastic gradient descent's update, written out once for every training path.

``torch.optim.SGD`` is built anew at every local training (its momentum must not carry over a
fusion) and steps through decorators and profiler hooks: for the small models here, one device's
epoch spent ~25 % of its time there (synthetic model [32, 64], 112 samples: 1.5-2.0 ms an epoch
with the optimiser, 1.2-1.3 ms with this; the first step also triggers lazy imports, seconds once
per process). The update is the optimiser's single-tensor path — weight decay added to the
gradient, a momentum buffer that starts as the first gradient, no dampening, no Nesterov — so the
parameters come out bit-identical to the library's, which a test keeps as the reference.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Protocol

import torch


class SgdSettings(Protocol):
    """The step's three figures (``training.TrainingConfig`` has them)."""

    @property
    def lr(self) -> float: ...

    @property
    def momentum(self) -> float: ...

    @property
    def weight_decay(self) -> float: ...


@torch.no_grad()
def sgd_step(params: Mapping[str, torch.Tensor], grads: Mapping[str, torch.Tensor | None],
             config: SgdSettings, momentum: MutableMapping[str, torch.Tensor] | None) -> None:
    """One ``torch.optim.SGD.step`` on ``params`` (updated in place; stacked views work too).
    ``momentum``: one zero-initialised buffer per parameter, kept across the steps of one
    training (a zero buffer gives SGD's first step exactly: 0·m + g = g), or None without
    momentum. A parameter without a gradient is skipped, as SGD skips it (no decay either)."""
    for name, p in params.items():
        g = grads[name]
        if g is None:
            continue
        if config.weight_decay != 0:
            g = g.add(p, alpha=config.weight_decay)
        if momentum is not None:
            buf = momentum[name]
            buf.mul_(config.momentum).add_(g)
            g = buf
        p.add_(g, alpha=-config.lr)
