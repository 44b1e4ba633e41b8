"""``fedprox``: gossip averaging with a proximal term that keeps local training near the average.

Follows FedProx (Li et al., MLSys 2020, Sec. 3, Eq. 2; FedSub journal Sec. 2 [MLSYS2020]): the
local objective is the cross-entropy plus (mu/2)·||w − w^t||², where w^t is the model the round
starts from. Serverless, w^t is the neighbourhood average this device computed at its last
fusion instead of the server's global model. With ``mu = 0`` it is exactly ``gossip-avg``.
"""

from __future__ import annotations

from pydantic import Field

from p2pfed.algorithms.base import Options, register
from p2pfed.algorithms.gossip_avg import GossipAvg
from p2pfed.learning.regularisers import proximal_loss, snapshot
from p2pfed.learning.training import train_epochs


class FedProxOptions(Options):
    mu: float = Field(0.01, ge=0, description="weight of the proximal term")


@register
class FedProx(GossipAvg):
    name = "fedprox"
    message_kind = "fedprox/model"
    Options = FedProxOptions
    options: FedProxOptions

    def train(self, round: int) -> None:
        anchor = snapshot(self.ctx.model)
        train_epochs(self.ctx.model, self.ctx.x_train, self.ctx.y_train, self.ctx.training,
                     self.ctx.torch_generator, extra_loss=proximal_loss(anchor, self.options.mu))
