"""``gossip-avg``: decentralised FedAvg by gossip (each device averages with its neighbours).

Every round a device sends its whole model to its neighbours and replaces its model by the
sample-count-weighted average of its own and the models that arrived since its last fusion —
FedAvg (McMahan et al., AISTATS 2017) with the server replaced by the neighbourhood, as in
decentralised gossip SGD (Lian et al., NeurIPS 2017).

``GossipAvg`` is also the base of the methods that average weights (FedProx, Ditto, FedPer,
FedRep, ProtoHAR, FedHome, FedCLAR). They differ only through three methods of this class: which
parameters are shared (``shared_names``), which peers a device averages with (``mates``), and the
final rounds in which a device trains alone (``local_phase``).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field
from scipy.stats import trim_mean

from p2pfed.algorithms.base import Algorithm, BaseOptions, FusionWork, Options, Payload, Received
from p2pfed.algorithms.model_payload import (averaging_job, checked_tensors, model_payload, parameter_shapes,
                                             sample_count)
from p2pfed.algorithms.registry import register


class GossipAvgOptions(Options):
    robust: Literal["none", "median", "trimmed-mean"] = Field(
        "none", description="how the models are combined: the sample-weighted mean (none), or, against "
        "peers that lie, the coordinate-wise median or trimmed mean of the own and the peers' models")
    trim_fraction: float = Field(0.2, ge=0, lt=0.5, description="trimmed-mean: the share cut at each end")


@register
class GossipAvg(Algorithm):
    name = "gossip-avg"
    message_kind = "gossip/model"
    Options: ClassVar[type[BaseOptions]] = GossipAvgOptions
    options: GossipAvgOptions

    # -- what the methods built on gossip averaging change ----------------------------------
    def shared_names(self) -> list[str]:
        """Parameters exchanged and averaged: the whole model here."""
        return [name for name, _ in self.ctx.model.named_parameters()]

    def mates(self, round: int, fresh: list[Received]) -> list[Received]:
        """The peers' payloads this device averages with: all that arrived, here."""
        return fresh

    def local_phase(self, round: int) -> bool:
        """True in the final rounds where a device neither sends nor averages; never, here."""
        return False

    # -- Algorithm -------------------------------------------------------------------------
    def share(self, round: int) -> Payload | None:
        if self.local_phase(round):
            return None
        return model_payload(self.ctx.model, self.ctx.num_samples, self.shared_names())

    @cached_property
    def shared_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shared parameters' shapes, read once: every message is checked against them."""
        return parameter_shapes(self.ctx.model, self.shared_names())

    def check(self, payload: Payload) -> dict[str, np.ndarray]:
        """The shared parameters, checked name by name against this device's, and the sample count."""
        tensors = checked_tensors(payload, self.shared_shapes)
        sample_count(payload)
        return tensors

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        if self.local_phase(round):
            return None
        peers = [(r.parsed, float(sample_count(r.payload))) for r in self.mates(round, fresh)]
        if self.options.robust != "none" and peers:
            robust_combine(self.ctx.model, [tensors for tensors, _ in peers], self.shared_shapes, self.options.robust,
                           self.options.trim_fraction)
            return None
        return averaging_job(self.ctx.model, float(self.ctx.num_samples), peers, self.shared_shapes)


def robust_combine(model: torch.nn.Module, peers: list[dict[str, np.ndarray]], names: Iterable[str],
                   rule: str, trim_fraction: float) -> None:
    """Each named parameter replaced by the coordinate-wise median (``median``) or trimmed mean
    (``trimmed-mean``, scipy's) of the model's own and the peers' values, every model counting
    once: a minority of peers sending poison moves it little, whatever their sample counts claim."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name in names:
            own = params[name].detach().cpu().numpy().astype(np.float64)
            stack = np.stack([own, *[np.asarray(p[name], dtype=np.float64) for p in peers]])
            combined = np.median(stack, axis=0) if rule == "median" else trim_mean(stack, trim_fraction, axis=0)
            params[name].copy_(torch.from_numpy(np.asarray(combined, dtype=np.float32)))
