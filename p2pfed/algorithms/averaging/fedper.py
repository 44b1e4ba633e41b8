"""``fedper``: the body is averaged with the neighbours, the head stays on the device.

Follows FedPer (Arivazhagan et al., 2019, Sec. 3): base layers are shared and aggregated,
personalisation layers never leave the device. Serverless, the base layers are averaged over
the neighbourhood as in ``gossip-avg``; only they are sent, so fusion cannot touch the head.

The head is the MLP's last ``head_layers`` Linear layers; on ``model.name: cnn`` (and any model
of the user's own) it is the submodule ``head``, the CNN's Linear classifier on its pooled
features: the conv blocks with their batch norms' scales and shifts are the shared body (the
batch norms' running statistics are buffers and stay on the device, as FedBN keeps them). There
``head_layers`` counts nothing and anything but 1 is refused before the run.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field, ValidationInfo, model_validator
from torch import nn
from typing_extensions import TypeVar

from p2pfed.algorithms.base import DeviceContext, FusionWork, Received, run_facts
from p2pfed.algorithms.averaging.gossip_avg import GossipAvg, GossipAvgOptions
from p2pfed.algorithms.registry import register
from p2pfed.learning.batched_fusion import FusionJob
from p2pfed.learning.model import MLP
from p2pfed.learning.regularisers import snapshot


class FedPerOptions(GossipAvgOptions):
    head_layers: int = Field(1, ge=1, description=(
        "The last layers, kept local (the head); the others (the body) are sent and averaged, and at least one body "
        "layer must remain. It counts the MLP's layers; another model keeps its `head` module local (leave this at "
        "1)."))

    @model_validator(mode="after")
    def _body_left(self, info: ValidationInfo) -> FedPerOptions:
        facts = run_facts(info)
        if facts is not None and facts.mlp_layers is None and self.head_layers != 1:
            raise ValueError(f"algorithm.head_layers: counts the MLP's layers; {facts.model_name!r} keeps its "
                             "`head` module (the last layer) local: leave head_layers out")
        if facts is not None and facts.mlp_layers is not None and self.head_layers >= facts.mlp_layers:
            raise ValueError(f"algorithm.head_layers: {self.head_layers} leaves no shared body in a "
                             f"{facts.mlp_layers}-layer model; use at most {facts.mlp_layers - 1}")
        return self


def split_body_head(model: nn.Module, head_layers: int, model_name: str = "mlp") -> tuple[list[str], list[str]]:
    """Parameter names of the shared body and of the local head: the MLP's last ``head_layers``
    layers, or the parameters of the submodule a model of the user's own names ``head``."""
    names = [name for name, _ in model.named_parameters()]
    if isinstance(model, MLP):
        num = len(model.layers)
        if head_layers >= num:
            raise ValueError(f"algorithm.head_layers: {head_layers} leaves no shared body in a "
                             f"{num}-layer model; use at most {num - 1}")
        head = [n for n in names if n.startswith("layers.") and int(n.split(".")[1]) >= num - head_layers]
    else:
        if not isinstance(getattr(model, "head", None), nn.Module):
            raise ValueError(f"model.name: {model_name!r} declares no head: a body/head method needs a "
                             "submodule named `head` (the classifier kept on the device)")
        if head_layers != 1:
            raise ValueError(f"algorithm.head_layers: counts the MLP's layers; {model_name!r} declares its head")
        head = [n for n in names if n.startswith("head.")]
    body = [n for n in names if n not in head]
    if not body:
        raise ValueError(f"model.name: {model_name!r}: its head holds every parameter; nothing is left to share")
    return body, head


FedPerOptionsT = TypeVar("FedPerOptionsT", bound=FedPerOptions, default=FedPerOptions, covariant=True)


@register
class FedPer(GossipAvg[FedPerOptionsT]):
    name = "fedper"
    message_kind = "fedper/body"

    def __init__(self, ctx: DeviceContext, options: FedPerOptionsT) -> None:
        super().__init__(ctx, options)
        self.body, self.head = split_body_head(ctx.model, options.head_layers, ctx.model_name)
        self.fusions_moved = {"body": 0, "head": 0}   # fusions that changed the body / the head

    def shared_names(self) -> list[str]:
        return self.body

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        job = super().fuse(fresh, round, now)
        if isinstance(job, FusionJob):   # count, once the fused values are in, which part they changed
            before = snapshot(self.ctx.model)
            job.then.append(lambda: self._count_moved(before))
        return job

    def _count_moved(self, before: dict[str, torch.Tensor]) -> None:
        moved = {n for n, p in self.ctx.model.named_parameters() if not torch.equal(p.detach(), before[n])}
        for part, names in (("body", self.body), ("head", self.head)):
            self.fusions_moved[part] += bool(moved.intersection(names))

    def stats(self) -> dict[str, Any]:
        """Fusions that changed the shared body, and the local head (0: it stays on the device)."""
        return {**super().stats(), "fusions_changing_body": self.fusions_moved["body"],
                "fusions_changing_head": self.fusions_moved["head"]}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "fusions_moved": dict(self.fusions_moved)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.fusions_moved = {k: int(v) for k, v in state["fusions_moved"].items()}
