"""``fedrep``: FedPer's split, trained head first (body frozen), then body (head frozen).

Follows FedRep (Collins et al., ICML 2021, Alg. 1; FedSub ubiquitous Sec. 2): each round a
client runs ``head_epochs`` epochs on its local head with the shared representation fixed,
then the training config's epochs on the representation with the new head fixed; only the
representation is aggregated — here, averaged with the neighbours.
"""

from __future__ import annotations

from pydantic import Field

from p2pfed.algorithms.base import register
from p2pfed.algorithms.fedper import FedPer, FedPerOptions
from p2pfed.learning.training import ExtraLoss, train_epochs


class FedRepOptions(FedPerOptions):
    head_epochs: int = Field(10, ge=1, description="epochs on the head before the body")


@register
class FedRep(FedPer):
    name = "fedrep"
    message_kind = "fedrep/body"
    Options = FedRepOptions
    options: FedRepOptions

    def body_loss(self) -> ExtraLoss | None:
        """An extra term for the body phase (ProtoHAR's prototype pull); none here."""
        return None

    def train(self, round: int) -> None:
        ctx = self.ctx
        params = dict(ctx.model.named_parameters())
        train_epochs(ctx.model, ctx.x_train, ctx.y_train, ctx.training, ctx.torch_generator,
                     epochs=self.options.head_epochs, trainable=[params[n] for n in self.head])
        train_epochs(ctx.model, ctx.x_train, ctx.y_train, ctx.training, ctx.torch_generator,
                     extra_loss=self.body_loss(), trainable=[params[n] for n in self.body])
