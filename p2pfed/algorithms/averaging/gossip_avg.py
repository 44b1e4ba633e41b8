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

from functools import cached_property

import numpy as np

from p2pfed.algorithms.base import Algorithm, FusionWork, Payload, Received
from p2pfed.algorithms.model_payload import (averaging_job, checked_tensors, model_payload, parameter_shapes,
                                             sample_count)
from p2pfed.algorithms.registry import register


@register
class GossipAvg(Algorithm):
    name = "gossip-avg"
    message_kind = "gossip/model"

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
        return averaging_job(self.ctx.model, float(self.ctx.num_samples), peers, self.shared_shapes)
