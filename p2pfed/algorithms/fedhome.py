"""``fedhome``: gossip averaging, then a local fine-tune on a SMOTE-balanced training set.

Follows FedHome (Wu et al., IEEE TMC 2022) as the FedSub papers run it (journal Sec. 2 and
4.2 [9296274]; ubiquitous Sec. 2 and 4.2): FedAvg trains a shared model, and in the last
``fine_tune_rounds`` rounds (the papers: 50 of 300) each client fine-tunes it alone on its
local data oversampled to equal class counts with SMOTE. Serverless, FedAvg is ``gossip-avg``;
in the final rounds a device neither sends nor averages. With ``fine_tune_rounds`` at least the
run's rounds it never communicates (local training on balanced data).
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from p2pfed.algorithms.base import DeviceContext, Options, register
from p2pfed.algorithms.gossip_avg import GossipAvg
from p2pfed.learning.balancing import smote_balance
from p2pfed.learning.training import train_epochs


class FedHomeOptions(Options):
    fine_tune_rounds: int = Field(10, ge=0, description="final rounds of local fine-tuning")
    smote_k: int = Field(5, ge=1, description="SMOTE's k nearest neighbours")


@register
class FedHome(GossipAvg):
    name = "fedhome"
    message_kind = "fedhome/model"
    Options = FedHomeOptions
    options: FedHomeOptions

    def __init__(self, ctx: DeviceContext, options: FedHomeOptions) -> None:
        super().__init__(ctx, options)
        self.balanced: tuple[torch.Tensor, torch.Tensor] | None = None

    def local_phase(self, round: int) -> bool:
        return round >= self.ctx.rounds - self.options.fine_tune_rounds

    def balanced_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The SMOTE-balanced training set, drawn once when the fine-tune starts."""
        if self.balanced is None:
            ctx = self.ctx
            x, y = smote_balance(ctx.device.x_train, ctx.device.y_train, self.options.smote_k,
                                 seed=int(ctx.rng.integers(2**31)))
            self.balanced = (torch.as_tensor(x, dtype=torch.float32),
                             torch.as_tensor(y, dtype=torch.int64))
        return self.balanced

    def train(self, round: int) -> None:
        if not self.local_phase(round):
            return super().train(round)
        x, y = self.balanced_set()
        train_epochs(self.ctx.model, x, y, self.ctx.training, self.ctx.torch_generator)

    def state_dict(self) -> dict[str, Any]:
        balanced = None if self.balanced is None else [t.clone() for t in self.balanced]
        return {**super().state_dict(), "balanced": balanced}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        b = state["balanced"]
        self.balanced = None if b is None else (b[0].clone(), b[1].clone())

    def stats(self) -> dict:
        """Synthetic samples SMOTE added to the device's fine-tune set (once it has started)."""
        if self.balanced is None:
            return {}
        return {"smote_added_samples": int(self.balanced[1].shape[0] - self.ctx.num_samples)}
