"""``gossip-avg``: decentralised FedAvg by gossip (each device averages with its neighbours).

Every round a device sends its whole model to its neighbours and replaces its model by the
sample-count-weighted average of its own and the models that arrived since its last fusion —
FedAvg (McMahan et al., AISTATS 2017) with the server replaced by the neighbourhood, as in
decentralised gossip SGD (Lian et al., NeurIPS 2017).
"""

from __future__ import annotations

import numpy as np
import torch

from p2pfed.algorithms.base import Algorithm, ArtifactError, Payload, register
from p2pfed.algorithms.model_payload import model_payload, model_tensors


@register
class GossipAvg(Algorithm):
    name = "gossip-avg"
    message_kind = "gossip/model"

    def share(self, round: int) -> Payload:
        return model_payload(self.ctx.model, self.ctx.num_samples)

    def check_payload(self, payload: Payload) -> None:
        model_tensors(self.ctx.model, payload)
        n = payload.meta.get("num_samples")
        if not isinstance(n, int) or n < 0:
            raise ArtifactError(f"meta 'num_samples' must be an int >= 0, got {n!r}")

    def fuse(self, round: int, now: float) -> None:
        fresh = self.take_fresh()
        if not fresh:
            return
        weights = [float(self.ctx.num_samples)] + [float(r.payload.meta["num_samples"]) for r in fresh]
        total = sum(weights)
        if total <= 0:
            return
        peers = [model_tensors(self.ctx.model, r.payload) for r in fresh]
        with torch.no_grad():
            for name, p in self.ctx.model.named_parameters():
                acc = p.detach().double() * weights[0]
                for w, tensors in zip(weights[1:], peers):
                    acc += torch.from_numpy(np.asarray(tensors[name], dtype=np.float64)) * w
                p.copy_((acc / total).to(p.dtype))
