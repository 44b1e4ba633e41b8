"""``fedrep``: FedPer's split, trained head first (body frozen), then body (head frozen).

Follows FedRep (Collins et al., ICML 2021, Alg. 1; FedSub ubiquitous Sec. 2): each round a
client runs ``head_epochs`` epochs on its local head with the shared representation fixed,
then the training config's epochs on the representation with the new head fixed; only the
representation is aggregated — here, averaged with the neighbours.
"""

from __future__ import annotations


from pydantic import Field
from typing_extensions import TypeVar

from p2pfed.algorithms.base import TrainingWork
from p2pfed.algorithms.averaging.fedper import FedPer, FedPerOptions
from p2pfed.algorithms.registry import register
from p2pfed.learning.training import ExtraLoss


class FedRepOptions(FedPerOptions):
    head_epochs: int = Field(10, ge=1, description=(
        "Epochs on the head (body frozen) before `training.epochs` on the body (head frozen), every round."))


FedRepOptionsT = TypeVar("FedRepOptionsT", bound=FedRepOptions, default=FedRepOptions, covariant=True)


@register
class FedRep(FedPer[FedRepOptionsT]):
    name = "fedrep"
    message_kind = "fedrep/body"

    def body_loss(self) -> ExtraLoss | None:
        """An extra term for the body phase (ProtoHAR's prototype pull); none here."""
        return None

    def train(self, round: int) -> TrainingWork:
        """Two phases: the head's epochs (body fixed), followed by the body's (head fixed)."""
        params = dict(self.ctx.model.named_parameters())
        body = self.training_job(extra_loss=self.body_loss(), trainable=[params[n] for n in self.body])
        return self.training_job(epochs=self.options.head_epochs, trainable=[params[n] for n in self.head],
                                 followed_by=body)
