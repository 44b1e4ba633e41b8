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
from typing import Any

import numpy as np
import torch
from typing_extensions import TypeVar

from p2pfed.algorithms.base import Algorithm, BaseOptions, FusionWork, Payload, Received
from p2pfed.algorithms.memory import DeviceFacts
from p2pfed.algorithms.model_payload import (averaging_job, checked_tensors, model_payload, parameter_shapes,
                                             sample_count)
from p2pfed.algorithms.registry import register
from p2pfed.learning.robust_fusion import combine, set_aside
from p2pfed.algorithms.robust import RobustOptions


class GossipAvgOptions(RobustOptions):
    """Gossip averaging's options: how the models are combined (``RobustOptions``)."""


GossipOptionsT = TypeVar("GossipOptionsT", bound=GossipAvgOptions, default=GossipAvgOptions, covariant=True)


@register
class GossipAvg(Algorithm[GossipOptionsT]):
    name = "gossip-avg"
    message_kind = "gossip/model"
    reads_fresh_only = True   # averages what arrived since its last fusion (a subclass reading the cache sets False)

    @classmethod
    def device_bytes(cls, options: BaseOptions, facts: DeviceFacts) -> float:
        """Its model and one message: a broadcast is decoded once for all its receivers, and what
        a device fused is freed before it trains, so its own share (or the one it fuses next) is
        all it adds; a class that keeps payloads once fused (``reads_fresh_only`` False) holds
        every neighbour's besides."""
        kept = 0.0 if cls.reads_fresh_only else facts.degree * facts.message_bytes
        return facts.model_bytes + facts.message_bytes + kept

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
    @cached_property
    def robust_counts(self) -> dict[str, int]:
        """What ``algorithm.robust`` did: fusions, peer models offered, peer models set aside."""
        return dict.fromkeys(("fusions", "peer_models", "set_aside"), 0)

    def stats(self) -> dict[str, Any]:
        """With ``robust``: the robust fusions and the share of peer models Krum did not select or
        clipping shortened (the defence seen acting)."""
        n, out = self.robust_counts, super().stats()   # the next class's in a method's MRO (ProtoHAR's)
        if self.options.robust == "none":
            return out
        return {**out, "robust_fusions": n["fusions"],
                "robust_peer_models_set_aside_fraction": n["set_aside"] / n["peer_models"] if n["peer_models"] else 0.0}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "robust_counts": dict(self.robust_counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.robust_counts.update({k: int(v) for k, v in state.get("robust_counts", {}).items()})

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
        return self.fuse_peers(peers, self.shared_shapes)

    def fuse_peers(self, peers: list[tuple[dict[str, np.ndarray], float]],
                   shapes: dict[str, tuple[int, ...]]) -> FusionWork:
        """The peers' parameters named in ``shapes`` fused into this device's model: by the
        ``robust`` rule, in place and counted, or else as an averaging job for the runtime."""
        if self.options.robust != "none" and peers:
            left_out = robust_into(self.ctx.model, float(self.ctx.num_samples), peers, shapes, self.options)
            self.robust_counts["fusions"] += 1
            self.robust_counts["peer_models"] += len(peers)
            self.robust_counts["set_aside"] += left_out
            return None
        return averaging_job(self.ctx.model, float(self.ctx.num_samples), peers, shapes)


def robust_into(model: torch.nn.Module, own_weight: float, peers: list[tuple[dict[str, np.ndarray], float]],
                names: Iterable[str], options: GossipAvgOptions) -> int:
    """The named parameters replaced by ``options.robust``'s combination of the own model and the
    peers' (``learning/robust_fusion.py``), all the shared parameters as one vector per model;
    returns how many peer models the rule set aside (``set_aside``)."""
    params = dict(model.named_parameters())
    names = list(names)
    own = np.concatenate([params[n].detach().cpu().numpy().ravel() for n in names]).astype(np.float64)
    rows = np.vstack([own, *[np.concatenate([np.asarray(p[n], dtype=np.float64).ravel() for n in names])
                             for p, _ in peers]])
    weights = np.array([own_weight, *[w for _, w in peers]], dtype=np.float64)
    combined = combine(rows, weights, options.robust, trim_fraction=options.trim_fraction,
                       byzantine=options.byzantine, select=options.krum_select, clip_norm=options.clip_norm)
    offset = 0
    with torch.no_grad():
        for n in names:
            size = params[n].numel()
            values = combined[offset:offset + size].reshape(params[n].shape).astype(np.float32)
            params[n].copy_(torch.from_numpy(values))
            offset += size
    return set_aside(rows, options.robust, byzantine=options.byzantine, select=options.krum_select,
                     clip_norm=options.clip_norm)
