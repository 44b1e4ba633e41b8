"""``lg-fedavg``: the top layers are averaged with the neighbours, the lower layers (the local
representation) never leave the device.

Follows LG-FedAvg (P. P. Liang, T. Liu, L. Ziyin, N. B. Allen, R. P. Auerbach, D. Brent,
R. Salakhutdinov and L.-P. Morency, "Think Locally, Act Globally: Federated Learning with Local
and Global Representations", arXiv:2001.01523): each device learns a local representation of its
raw data and all devices together a global model that operates on it. As the authors' code does
(``main_lg.py``), the last ``global_layers`` layers are averaged and the earlier ones stay on the
device. Serverless, the global layers are averaged over the neighbourhood as in ``gossip-avg``;
only they are sent. The authors' code starts from a FedAvg-trained model: ``fedavg_rounds``
first rounds average and send the whole model (``gossip-avg``), with only the neighbours that
sent theirs whole.

A layer is a group of the model's ``unit_layer_params``: a Linear layer of the MLP; on
``model.name: cnn`` a convolution with its batch norm's scale and shift, or the head.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
from pydantic import Field, ValidationInfo, model_validator
from torch import nn
from typing_extensions import TypeVar

from p2pfed.algorithms.averaging.gossip_avg import GossipAvgOptions
from p2pfed.algorithms.averaging.split_gossip import SplitGossip
from p2pfed.algorithms.base import FusionWork, Payload, Received, run_facts
from p2pfed.algorithms.model_payload import (checked_tensors, model_payload, parameter_shapes,
                                             sample_count)
from p2pfed.algorithms.registry import register


class LgFedAvgOptions(GossipAvgOptions):
    global_layers: int = Field(1, ge=1, description=(
        "The last layers (nearest the output), sent and averaged with the neighbours: the global model; the "
        "earlier ones, the local representation, never leave the device, and at least one must remain. A layer is "
        "a Linear layer of the MLP, a convolution block (with its batch norm) or the head of the CNN."))

    fedavg_rounds: int = Field(0, ge=0, description=(
        "The first rounds, in which the whole model is sent and averaged (gossip-avg), as the authors' code starts "
        "LG-FedAvg from a FedAvg-trained model; 0: local and global from the start."))

    @model_validator(mode="after")
    def _local_left(self, info: ValidationInfo) -> LgFedAvgOptions:
        facts = run_facts(info)
        if facts is not None and self.fedavg_rounds >= facts.rounds:
            raise ValueError(f"algorithm.fedavg_rounds: {self.fedavg_rounds} leaves no LG-FedAvg round in a run of "
                             f"{facts.rounds}; use at most {facts.rounds - 1}")
        if facts is not None and facts.mlp_layers is not None and self.global_layers >= facts.mlp_layers:
            raise ValueError(f"algorithm.global_layers: {self.global_layers} leaves no local layer in a "
                             f"{facts.mlp_layers}-layer model; use at most {facts.mlp_layers - 1}")
        return self


def split_local_global(model: nn.Module, global_layers: int, model_name: str = "mlp") -> tuple[list[str], list[str]]:
    """Parameter names of the global layers (the last ``global_layers`` of the model's
    ``unit_layer_params``) and of the local ones (the others)."""
    groups = getattr(model, "unit_layer_params", None)
    if groups is None:
        raise ValueError(f"model.name: {model_name!r} declares no layers (unit_layer_params): lg-fedavg needs them "
                         "to tell the local representation from the global layers; use model.name: mlp or cnn")
    layers = [list(group) for group in groups()]
    if global_layers >= len(layers):
        raise ValueError(f"algorithm.global_layers: {global_layers} leaves no local layer in a {len(layers)}-layer "
                         f"model; use at most {len(layers) - 1}")
    top = {n for group in layers[len(layers) - global_layers:] for n in group}
    names = [n for n, _ in model.named_parameters()]
    return [n for n in names if n in top], [n for n in names if n not in top]


LgFedAvgOptionsT = TypeVar("LgFedAvgOptionsT", bound=LgFedAvgOptions, default=LgFedAvgOptions, covariant=True)


@register
class LgFedAvg(SplitGossip[LgFedAvgOptionsT]):
    name = "lg-fedavg"
    message_kind = "lg-fedavg/global"
    labels = ("global", "local")

    def split(self) -> tuple[list[str], list[str]]:
        return split_local_global(self.ctx.model, self.options.global_layers, self.ctx.model_name)

    def warming(self, round: int) -> bool:
        """A FedAvg round: the whole model is sent and averaged."""
        return round < self.options.fedavg_rounds

    @cached_property
    def whole_shapes(self) -> dict[str, tuple[int, ...]]:
        return parameter_shapes(self.ctx.model)

    def share(self, round: int) -> Payload | None:
        if self.warming(round):
            return model_payload(self.ctx.model, self.ctx.num_samples)
        return super().share(round)

    def check(self, payload: Payload) -> dict[str, np.ndarray]:
        """The global layers; the whole model when the payload carries any local layer (a FedAvg
        round's share), each checked against this device's shapes."""
        whole = any(name in payload.tensors for name in self.kept)
        tensors = checked_tensors(payload, self.whole_shapes if whole else self.shared_shapes)
        sample_count(payload)
        return tensors

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        if not self.warming(round):
            return super().fuse(fresh, round, now)
        peers = [(r.parsed, float(sample_count(r.payload))) for r in fresh if self.kept[0] in r.parsed]
        return self.counted(self.fuse_peers(peers, self.whole_shapes))
