"""Sharing class prototypes and pulling local features toward their neighbourhood average.

The common part of FedProto and ProtoHAR (FedSub journal Sec. 2 [Tan_Long_LIU_Zhou_Lu_Jiang_
Zhang_2022], [10122911]): a device sends the mean feature of each class it holds, averages the
prototypes it holds from itself and its peers per class (weighted by sample counts), and adds
``proto_weight``·MSE(f(x), prototype of y) to its local loss.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
import torch
from pydantic import Field
from typing_extensions import TypeVar

from p2pfed.algorithms.base import Algorithm, ArtifactError, Options, Payload, expect_array
from p2pfed.algorithms.state import array_from_state, array_state
from p2pfed.learning.model import feature_dim
from p2pfed.learning.prototypes import average_prototypes, class_prototypes
from p2pfed.learning.regularisers import prototype_loss
from p2pfed.learning.training import ExtraLoss


class PrototypeOptions(Options):
    proto_weight: float = Field(1.0, ge=0, description=(
        "Weight of the MSE between a sample's feature and the neighbourhood-averaged prototype of its class."))


Entry = tuple[np.ndarray, np.ndarray, np.ndarray]  # classes, prototypes, counts


PrototypeOptionsT = TypeVar("PrototypeOptionsT", bound=PrototypeOptions, default=PrototypeOptions, covariant=True)


class PrototypeSharing(Algorithm[PrototypeOptionsT]):
    """Mixin for methods that share prototypes; keeps the averaged prototypes between rounds."""

    averaged: tuple[torch.Tensor, torch.Tensor] | None = None  # (prototypes, known)
    own_prototypes: Entry | None = None
    prototype_pulls = 0   # trainings that included the prototype term

    def prototype_parts(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """This device's prototypes as payload meta and tensors (computed from the current model)."""
        ctx = self.ctx
        # any model with ``features(x)`` (``prototype_dim`` checks it)
        classes, protos, counts = class_prototypes(ctx.model, ctx.x_train, ctx.y_train, ctx.num_classes)
        self.own_prototypes = (classes, protos, counts)
        return ({"proto_classes": [int(c) for c in classes], "proto_counts": [int(n) for n in counts]},
                {"prototypes": protos})

    @cached_property
    def prototype_dim(self) -> int:
        """Prototypes live in the model's feature space (``features(x)``, what its head reads)."""
        return feature_dim(self.ctx.model, self.ctx.model_name)

    def parse_prototypes(self, payload: Payload) -> Entry:
        classes, counts = payload.meta.get("proto_classes"), payload.meta.get("proto_counts")
        nc = self.ctx.num_classes
        if (not isinstance(classes, list) or len(set(classes)) != len(classes)
                or not all(isinstance(c, int) and 0 <= c < nc for c in classes)):
            raise ArtifactError(f"meta 'proto_classes' must be distinct class ids in 0..{nc - 1}, "
                                f"got {classes!r}")
        if (not isinstance(counts, list) or len(counts) != len(classes)
                or not all(isinstance(n, int) and n > 0 for n in counts)):
            raise ArtifactError("meta 'proto_counts' must be one int > 0 per class")
        dim = self.prototype_dim
        protos = expect_array(payload, "prototypes", (len(classes), dim),
                              check=lambda a: bool(np.isfinite(a).all()))
        return (np.asarray(classes, dtype=np.int64), np.asarray(protos, dtype=np.float32),
                np.asarray(counts, dtype=np.int64))

    def average_cached_prototypes(self) -> None:
        """Average this device's and its cached peers' newest prototypes, class by class."""
        entries = [self.parse_prototypes(r.payload) for _, r in sorted(self.cache.items())]
        if self.own_prototypes is not None:
            entries.append(self.own_prototypes)
        if entries:
            self.averaged = average_prototypes(entries, self.ctx.num_classes, self.prototype_dim)

    def state_dict(self) -> dict[str, Any]:
        own = None if self.own_prototypes is None else [array_state(a) for a in self.own_prototypes]
        averaged = None if self.averaged is None else [t.clone() for t in self.averaged]
        return {**super().state_dict(), "own_prototypes": own, "averaged_prototypes": averaged,
                "prototype_pulls": self.prototype_pulls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        own, averaged = state["own_prototypes"], state["averaged_prototypes"]
        self.own_prototypes = None if own is None else tuple(array_from_state(t) for t in own)
        self.averaged = None if averaged is None else (averaged[0].clone(), averaged[1].clone())
        self.prototype_pulls = int(state["prototype_pulls"])

    def prototype_term(self) -> ExtraLoss | None:
        """The pull toward the averaged prototypes for one training, once there are any (counted)."""
        if self.averaged is None or self.options.proto_weight == 0:
            return None
        self.prototype_pulls += 1
        protos, known = self.averaged
        return prototype_loss(protos, known, self.options.proto_weight)

    def stats(self) -> dict[str, Any]:
        """Trainings pulled toward averaged prototypes, and the classes those cover (of which
        some from peers only: the collaboration a device gets)."""
        out = {**super().stats(), "prototype_pulls": self.prototype_pulls}
        if self.averaged is not None:
            known = self.averaged[1]
            own = set() if self.own_prototypes is None else {int(c) for c in self.own_prototypes[0]}
            out["averaged_prototype_classes"] = int(known.sum())
            out["peer_only_prototype_classes"] = int(sum(1 for c in range(len(known))
                                                         if bool(known[c]) and c not in own))
        return out
