"""``ditto``: a personal model regularised toward the gossip-averaged global model.

Follows Ditto (Li et al., ICML 2021, Alg. 1; FedSub journal Sec. 2 and 4.2 [pmlr-v139-li21h]):
each device keeps two models. The global one trains on plain cross-entropy and is averaged
with the neighbours exactly as in ``gossip-avg``; the personal one v trains on the
cross-entropy plus (lam/2)·||v − w||², w being the global model at the start of the round, and
it is the one evaluated. The option is called ``lam`` as in Ditto's reference code (``--lam``).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import Field
from torch import nn

from p2pfed.algorithms.base import DeviceContext, TrainingWork
from p2pfed.algorithms.averaging.gossip_avg import GossipAvg, GossipAvgOptions
from p2pfed.algorithms.registry import register
from p2pfed.algorithms.state import model_state
from p2pfed.learning.regularisers import proximal_loss, snapshot


class DittoOptions(GossipAvgOptions):
    lam: float = Field(0.1, ge=0, description=(
        "Lambda: the pull (λ/2)·‖v − w‖² of the personal model v toward the gossip-averaged global model w; "
        "the personal model is the one evaluated."))


@register
class Ditto(GossipAvg[DittoOptions]):
    name = "ditto"
    message_kind = "ditto/model"

    def __init__(self, ctx: DeviceContext, options: DittoOptions) -> None:
        super().__init__(ctx, options)
        self.personal = copy.deepcopy(ctx.model)  # ctx.model is the global model, the one shared

    def train(self, round: int) -> TrainingWork:
        """The personal model trains here (its pull toward the global model as the round starts
        is its own); the global model's plain training is the job, which the runtime may batch
        with other devices'. Its draws come from the device's stream after the personal model's."""
        anchor = snapshot(self.ctx.model)
        self.training_job(model=self.personal, extra_loss=proximal_loss(anchor, self.options.lam)).run()
        return self.training_job()

    def evaluated_model(self) -> nn.Module:
        return self.personal

    def stats(self) -> dict[str, Any]:
        """L2 distance between the personal model (evaluated) and the global one (shared): 0
        would mean Ditto evaluates what gossip averaging would."""
        sq = sum(float(((p.detach() - q.detach()) ** 2).sum())
                 for p, q in zip(self.personal.parameters(), self.ctx.model.parameters(), strict=True))
        return {**super().stats(), "personal_global_l2": sq ** 0.5}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "personal": model_state(self.personal)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.personal.load_state_dict(state["personal"])
