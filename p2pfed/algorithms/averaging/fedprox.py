"""``fedprox``: gossip averaging with a proximal term that keeps local training near the average.

Follows FedProx (Li et al., MLSys 2020, Sec. 3, Eq. 2; FedSub journal Sec. 2 [MLSYS2020]): the
local objective is the cross-entropy plus (mu/2)·||w − w^t||², where w^t is the model the round
starts from. Serverless, w^t is the neighbourhood average this device computed at its last
fusion instead of the server's global model. With ``mu = 0`` it is exactly ``gossip-avg``.
"""

from __future__ import annotations

from pydantic import Field

from p2pfed.algorithms.base import TrainingWork
from p2pfed.algorithms.averaging.gossip_avg import GossipAvg, GossipAvgOptions
from p2pfed.algorithms.registry import register
from p2pfed.learning.regularisers import proximal_loss, snapshot


class FedProxOptions(GossipAvgOptions):
    mu: float = Field(0.01, ge=0, description=(
        "Weight of the proximal term (mu/2)·‖w − w_start‖² toward the model the round started from (the "
        "neighbourhood average); 0 is gossip averaging."))


@register
class FedProx(GossipAvg[FedProxOptions]):
    name = "fedprox"
    message_kind = "fedprox/model"

    def train(self, round: int) -> TrainingWork:
        return self.training_job(extra_loss=proximal_loss(snapshot(self.ctx.model), self.options.mu))
