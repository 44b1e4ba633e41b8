"""``protohar``: FedRep's shared representation plus FedProto's prototype pull on it.

Follows ProtoHAR (Cheng et al., IEEE JBHI 2023) as the FedSub papers describe it (journal
Sec. 2 and 4.2 [10122911]; ubiquitous Sec. 2): clients share their class prototypes *and* the
representation network that produced them; after aggregation each client trains its local
classifier on the global representation, then the representation guided by the global
prototypes. It is therefore not an alias of ``fedproto``, which shares no weights: here the
body is averaged with the neighbours (``fedrep``'s split and head-then-body schedule) and the
body phase adds ``proto_weight``·MSE(f(x), averaged prototype of y).

The defaults are those of the reference implementation the FedSub papers ran (ProtoHAR's
framework, ``main.py``: ``--plocal_steps 1`` head epoch, ``--lamda 0.1`` prototype weight).
Earlier versions used ``head_epochs: 10`` and ``proto_weight: 1.0``; set those to run that
variant.
"""

from __future__ import annotations

from pydantic import Field

from typing import Any

from p2pfed.algorithms.base import DeviceContext, FusionWork, Payload, Received
from p2pfed.algorithms.averaging.fedrep import FedRep, FedRepOptions
from p2pfed.algorithms.averaging.prototype_sharing import PrototypeOptions, PrototypeSharing
from p2pfed.algorithms.registry import register
from p2pfed.learning.training import ExtraLoss


class ProtoHAROptions(FedRepOptions, PrototypeOptions):
    head_epochs: int = Field(1, ge=1, description=(
        "Epochs on the head (body frozen) before `training.epochs` on the body, every round (the reference code's "
        "`--plocal_steps`)."))
    proto_weight: float = Field(0.1, ge=0, description=(
        "Weight of the MSE between a sample's feature and the neighbourhood-averaged prototype of its class (the "
        "reference code's `--lamda`)."))


@register
class ProtoHAR(FedRep[ProtoHAROptions], PrototypeSharing[ProtoHAROptions]):
    name = "protohar"
    message_kind = "protohar/body-prototypes"

    def __init__(self, ctx: DeviceContext, options: ProtoHAROptions) -> None:
        super().__init__(ctx, options)
        _ = self.prototype_dim   # a model without features and a Linear head is refused here

    def body_loss(self) -> ExtraLoss | None:
        return self.prototype_term()

    def share(self, round: int) -> Payload | None:
        payload = super().share(round)
        if payload is None:
            return None
        meta, tensors = self.prototype_parts()
        return Payload(meta={**payload.meta, **meta}, tensors={**payload.tensors, **tensors})

    def check(self, payload: Payload) -> Any:
        tensors = super().check(payload)
        self.parse_prototypes(payload)
        return tensors

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        job = super().fuse(fresh, round, now)
        self.average_cached_prototypes()
        return job
