"""``fedproto``: only class prototypes are exchanged; they regularise each device's own model.

Follows FedProto (Tan et al., AAAI 2022, Alg. 1, Eq. 6-7; FedSub journal Sec. 2): a device
trains on cross-entropy plus ``proto_weight``·MSE between each sample's feature and the global
prototype of its class, then shares its own class prototypes; model weights never leave it.
Serverless, the "global" prototypes are the count-weighted averages over the device itself and
the newest prototypes cached from each peer (neighbours), computed at every fusion.
"""

from __future__ import annotations

from p2pfed.algorithms.base import DeviceContext, FusionWork, Payload, Received, TrainingWork
from p2pfed.algorithms.averaging.prototype_sharing import Entry, PrototypeOptions, PrototypeSharing
from p2pfed.algorithms.registry import register


@register
class FedProto(PrototypeSharing[PrototypeOptions]):
    name = "fedproto"
    message_kind = "fedproto/prototypes"

    def __init__(self, ctx: DeviceContext, options: PrototypeOptions) -> None:
        super().__init__(ctx, options)
        _ = self.prototype_dim   # a model without features and a Linear head is refused here

    def train(self, round: int) -> TrainingWork:
        return self.training_job(extra_loss=self.prototype_term())

    def share(self, round: int) -> Payload:
        meta, tensors = self.prototype_parts()
        return Payload(meta=meta, tensors=tensors)

    def check(self, payload: Payload) -> Entry:
        return self.parse_prototypes(payload)

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        self.average_cached_prototypes()
        return None
