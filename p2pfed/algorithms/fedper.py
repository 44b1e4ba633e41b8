"""``fedper``: the body is averaged with the neighbours, the head stays on the device.

Follows FedPer (Arivazhagan et al., 2019, Sec. 3): base layers are shared and aggregated,
personalisation layers never leave the device. Serverless, the base layers are averaged over
the neighbourhood as in ``gossip-avg``; only they are sent, so fusion cannot touch the head.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from p2pfed.algorithms.base import DeviceContext, Options, register
from p2pfed.algorithms.gossip_avg import GossipAvg
from p2pfed.learning.batched_fusion import FusionJob
from p2pfed.learning.model import MLP
from p2pfed.learning.regularisers import snapshot


class FedPerOptions(Options):
    head_layers: int = Field(1, ge=1, description="last layers kept local (the head)")


def split_body_head(model: MLP, head_layers: int) -> tuple[list[str], list[str]]:
    """Parameter names of the shared body and of the local head (the last ``head_layers``)."""
    num = len(model.layers)
    if head_layers >= num:
        raise ValueError(f"algorithm.head_layers: {head_layers} leaves no shared body in a "
                         f"{num}-layer model; use at most {num - 1}")
    body, head = [], []
    for name, _ in model.named_parameters():
        (head if int(name.split(".")[1]) >= num - head_layers else body).append(name)
    return body, head


@register
class FedPer(GossipAvg):
    name = "fedper"
    message_kind = "fedper/body"
    Options = FedPerOptions
    options: FedPerOptions

    def __init__(self, ctx: DeviceContext, options: FedPerOptions) -> None:
        super().__init__(ctx, options)
        self.body, self.head = split_body_head(ctx.model, options.head_layers)
        self.fusions_moved = {"body": 0, "head": 0}   # fusions that changed the body / the head

    def shared_names(self) -> list[str]:
        return self.body

    def fusion_job(self, round: int, now: float) -> FusionJob | None:
        job = super().fusion_job(round, now)
        if job is not None:   # count, once the fused values are in, which part they changed
            before = snapshot(self.ctx.model)
            job.then.append(lambda: self._count_moved(before))
        return job

    def _count_moved(self, before: dict[str, torch.Tensor]) -> None:
        moved = {n for n, p in self.ctx.model.named_parameters() if not torch.equal(p.detach(), before[n])}
        for part, names in (("body", self.body), ("head", self.head)):
            self.fusions_moved[part] += bool(moved.intersection(names))

    def stats(self) -> dict:
        """Fusions that changed the shared body, and the local head (0: it stays on the device)."""
        return {**super().stats(), "fusions_changing_body": self.fusions_moved["body"],
                "fusions_changing_head": self.fusions_moved["head"]}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "fusions_moved": dict(self.fusions_moved)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.fusions_moved = {k: int(v) for k, v in state["fusions_moved"].items()}

    @classmethod
    def scenario_problems(cls, options: FedPerOptions, *, rounds: int, layers: int) -> list[str]:
        if options.head_layers >= layers:
            return [f"algorithm.head_layers: {options.head_layers} leaves no shared body in a "
                    f"{layers}-layer model; use at most {layers - 1}"]
        return []
