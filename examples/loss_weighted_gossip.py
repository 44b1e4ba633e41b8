"""Loss-weighted gossip: average with the neighbours whose models fit this device's own data.

Each device sends its whole model. At a fusion it scores its own model and each newly arrived one
by cross-entropy on its own training data and averages them with weights exp(-loss / temperature),
so neighbours whose data resemble its own count most. A method written against p2pfed's interface
only (docs/writing-a-method.md): ``algorithm.name: loss_weighted_gossip.py:LossWeightedGossip``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch.func import functional_call

from p2pfed.algorithms import (Algorithm, FusionJob, Options, Payload, Received, checked_tensors, model_payload,
                               parameter_shapes)


class LossWeightedOptions(Options):
    temperature: float = Field(0.5, gt=0, description="lower: trust the best-fitting models more")


class LossWeightedGossip(Algorithm[LossWeightedOptions]):
    name = "loss-weighted-gossip"
    own_weight = 1.0   # the device's own weight at its last fusion: reported, so kept in its state

    def share(self, round: int) -> Payload:
        return model_payload(self.ctx.model, self.ctx.num_samples)

    def check(self, payload: Payload) -> dict[str, torch.Tensor]:
        arrays = checked_tensors(payload, parameter_shapes(self.ctx.model))   # ArtifactError if off
        return {name: torch.tensor(array) for name, array in arrays.items()}

    @torch.no_grad()
    def loss_on_own_data(self, params: dict[str, torch.Tensor]) -> float:
        self.ctx.model.eval()
        return float(F.cross_entropy(functional_call(self.ctx.model, params, (self.ctx.x_train,)), self.ctx.y_train))

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionJob:
        own = {name: p.detach() for name, p in self.ctx.model.named_parameters()}
        members = [own, *(r.parsed for r in fresh)]
        losses = np.array([self.loss_on_own_data(m) for m in members])
        weights = np.exp(-(losses - losses.min()) / self.options.temperature)
        self.own_weight = float(weights[0] / weights.sum())
        return FusionJob(own, members, {name: weights / weights.sum() for name in own})   # the runtime sums

    def stats(self) -> dict[str, float]:
        return {"own_weight": self.own_weight}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "own_weight": self.own_weight}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.own_weight = float(state["own_weight"])
