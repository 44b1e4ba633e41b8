"""``fedproto``: only class prototypes are exchanged; they regularise each device's own model.

Follows FedProto (Tan et al., AAAI 2022, Alg. 1, Eq. 6-7; FedSub journal Sec. 2): a device
trains on cross-entropy plus ``proto_weight``·MSE between each sample's feature and the global
prototype of its class, then shares its own class prototypes; model weights never leave it.
Serverless, the "global" prototypes are the count-weighted averages over the device itself and
the newest prototypes cached from each peer (neighbours), computed at every fusion.
"""

from __future__ import annotations

from p2pfed.algorithms.base import Payload, register
from p2pfed.algorithms.prototype_sharing import PrototypeOptions, PrototypeSharing
from p2pfed.learning.training import train_epochs


@register
class FedProto(PrototypeSharing):
    name = "fedproto"
    message_kind = "fedproto/prototypes"
    Options = PrototypeOptions
    options: PrototypeOptions

    def train(self, round: int) -> None:
        ctx = self.ctx
        train_epochs(ctx.model, ctx.x_train, ctx.y_train, ctx.training, ctx.torch_generator,
                     extra_loss=self.prototype_term())

    def share(self, round: int) -> Payload:
        meta, tensors = self.prototype_parts()
        return Payload(meta=meta, tensors=tensors)

    def check_payload(self, payload: Payload) -> None:
        self.parse_prototypes(payload)

    def fuse(self, round: int, now: float) -> None:
        self.take_fresh()
        self.average_cached_prototypes()
