"""One model's local training, with SGD's update written out, equals ``torch.optim.SGD`` bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from p2pfed.learning.model import build_model
from p2pfed.learning.regularisers import proximal_loss, snapshot
from p2pfed.learning.training import TrainingConfig, train_epochs


def library_train(model, x, y, config, generator, extra_loss=None, trainable=None) -> float:
    """``train_epochs`` as it was written with the library's optimiser: the reference."""
    params = trainable if trainable is not None else list(model.parameters())
    opt = torch.optim.SGD(params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    model.train()
    losses = []
    for _ in range(config.epochs):
        order = torch.randperm(x.shape[0], generator=generator)
        for start in range(0, x.shape[0], config.batch_size):
            idx = order[start:start + config.batch_size]
            logits = model(x[idx])
            loss = F.cross_entropy(logits, y[idx])
            if extra_loss is not None:
                loss = loss + extra_loss(model, x[idx], y[idx], logits)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return float(np.mean(losses))


@pytest.mark.parametrize("config", [TrainingConfig(epochs=2, batch_size=7, lr=0.1),
                                    TrainingConfig(epochs=2, batch_size=8, lr=0.05, momentum=0.9),
                                    TrainingConfig(epochs=3, batch_size=5, lr=0.05, momentum=0.5, weight_decay=0.01)],
                         ids=["plain", "momentum", "momentum-decay"])
@pytest.mark.parametrize("variant", ["whole", "proximal", "head-only", "gated"])
def test_written_out_sgd_is_the_library_optimiser_bit_for_bit(config, variant):
    data = torch.Generator().manual_seed(1)
    x, y = torch.randn(37, 6, generator=data), torch.randint(0, 3, (37,), generator=data)
    gates = variant == "gated"   # a parameter some steps leave without a gradient would be skipped too
    mine, ref = (build_model(6, 3, [8, 5], seed=4, unit_gates=gates) for _ in range(2))
    extra = {m: proximal_loss(snapshot(m), 0.3) if variant == "proximal" else None for m in (mine, ref)}
    trainable = {m: list(m.layers[-1].parameters()) if variant == "head-only" else None for m in (mine, ref)}
    got = train_epochs(mine, x, y, config, torch.Generator().manual_seed(9), extra_loss=extra[mine],
                       trainable=trainable[mine])
    want = library_train(ref, x, y, config, torch.Generator().manual_seed(9), extra_loss=extra[ref],
                         trainable=trainable[ref])
    assert got == want
    for (name, p), q in zip(mine.named_parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q), name
    if variant == "head-only":
        assert torch.equal(mine.layers[0].weight, build_model(6, 3, [8, 5], seed=4).layers[0].weight)
