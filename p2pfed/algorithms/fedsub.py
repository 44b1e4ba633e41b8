"""``fedsub``: FedSub without a server — class prototypes and class subnetworks, fused per class.

Follows Pesenti et al., *FedSub* (journal version, Sec. 3): every round a device trains E local
epochs (Alg. 1 l.2), computes one prototype per class it holds (Eq. 1), a reliability score per
class (l.5) and one subnetwork per class (Eq. 2 naive activations, or Eq. 4-5 LRP), and shares
them. The server's part (Alg. 2) runs on every device over its own and its cached peers'
artifacts: per class, K-means on the prototypes with K in 2..n-1 chosen by the Davies–Bouldin
index, then fusion of the cluster-mates' subnetworks (Eq. 9-10 *Overlapping Components* by
default; Eq. 6-7 cluster average, Eq. 8 leadership), and only the fused parameters change (l.13).
Optionally (ubiquitous version, Alg. 3) the prototypes members lack are first predicted by
collaborative filtering, so a device is also clustered, and fused, for classes it has no data for
yet; and optionally (journal Sec. 3.3) shared prototypes carry Gaussian or Laplace noise.

Serverless adaptations: the cache holds the newest artifacts per *peer that reached this device*
(neighbours, or carriers of them), so each device clusters its own view; all devices start from
the same initial weights (a shared seed), as a server's first broadcast would give them.
Under intermittent contacts the share splits into a tiny prototype part and a larger subnetwork
part (``share_parts``): a peer known only by its prototypes still shapes the clustering, and
only peers whose subnetworks arrived contribute parameters.
On the wire a device sends the rows of the union of its class subnetworks once, plus one bit per
unit and class (see ``encode_subnetworks``), instead of one masked copy of the model per class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from p2pfed.algorithms.base import (Algorithm, ArtifactError, Options, Payload, Received,
                                    expect_array, register)
from p2pfed.algorithms.state import array_from_state, array_state
from p2pfed.learning.clustering import ClusteringCache
from p2pfed.learning.collaborative import predict_missing
from p2pfed.learning.fusion import FUSIONS, combine_cluster_updates
from p2pfed.learning.model import MLP
from p2pfed.learning.privacy import perturb
from p2pfed.learning.prototypes import class_prototypes
from p2pfed.learning.subnetworks import (EXTRACTORS, UnitMasks, extract_unit_masks,
                                         parameter_masks, union_units)
from p2pfed.learning.training import per_class_accuracy


class FedSubOptions(Options):
    extraction: str = Field("naive", description="subnetwork extraction rule")
    fusion: Literal["overlap", "cluster-avg", "leadership"] = "overlap"
    score: Literal["equal", "size", "accuracy", "size-accuracy"] = "equal"
    depth: Literal["full", "partial"] = "full"
    shared_layers: int = Field(2, ge=1, description="layers fused when depth is partial")
    float16: bool = Field(False, description="send parameter values as float16")
    max_k: int | None = Field(None, ge=2, description="upper bound of the K sweep")
    kmeans_n_init: int = Field(4, ge=1)
    min_cluster_size: int = Field(1, ge=1, description="pass over K whose partition has smaller clusters")
    cache_max_age_s: float | None = Field(None, gt=0, description="drop cached artifacts older than this")
    predict_missing: bool = Field(False, description="predict absent prototypes (ubiquitous Alg. 3)")
    predict_neighbors: int = Field(3, ge=1, description="n most similar members in Eq. 2")
    proto_noise: Literal["none", "gaussian", "laplace"] = "none"
    proto_noise_sigma: float | None = Field(None, gt=0, description="gaussian noise std")
    proto_noise_epsilon: float | None = Field(None, gt=0, description="laplace privacy budget")
    proto_noise_sensitivity: float = Field(1.0, gt=0, description="laplace L1 sensitivity")

    @field_validator("extraction")
    @classmethod
    def _known_extraction(cls, v: str) -> str:
        if v not in EXTRACTORS:
            raise ValueError(f"unknown extraction {v!r}; choose one of {sorted(EXTRACTORS)}")
        return v

    @model_validator(mode="after")
    def _noise_parameters(self) -> FedSubOptions:
        """Each noise kind needs its own parameter, and a parameter without its kind is a typo."""
        if self.proto_noise == "gaussian" and self.proto_noise_sigma is None:
            raise ValueError("proto_noise 'gaussian' needs proto_noise_sigma")
        if self.proto_noise == "laplace" and self.proto_noise_epsilon is None:
            raise ValueError("proto_noise 'laplace' needs proto_noise_epsilon")
        if self.proto_noise != "gaussian" and self.proto_noise_sigma is not None:
            raise ValueError(f"proto_noise_sigma is set but proto_noise is {self.proto_noise!r}")
        if self.proto_noise != "laplace" and self.proto_noise_epsilon is not None:
            raise ValueError(f"proto_noise_epsilon is set but proto_noise is {self.proto_noise!r}")
        return self


@dataclass
class Artifacts:
    """One device's class-level artifacts, decoded into dense per-parameter form."""

    classes: list[int]
    prototypes: np.ndarray | None       # (C, d); None when only the subnetwork part arrived
    scores: list[float]
    values: dict[str, torch.Tensor] | None  # dense parameters, zero outside the union of subnetworks
    units: dict[int, UnitMasks] | None      # class -> unit mask per layer


PARTS = ("whole", "prototypes", "subnetworks")


def encode_subnetworks(model: MLP, units: dict[int, UnitMasks], float16: bool) -> dict[str, np.ndarray]:
    """Rows of the union of the class subnetworks (sent once) plus one bit per unit and class."""
    classes = sorted(units)
    union = union_units(units)
    dtype = np.float16 if float16 else np.float32
    total = sum(l.out_features for l in model.layers)
    bits = (np.stack([np.concatenate(units[c]) for c in classes]).astype(bool) if classes
            else np.zeros((0, total), dtype=bool))
    tensors: dict[str, np.ndarray] = {"units": np.packbits(bits, axis=1)}   # 8 units per byte
    for i, layer in enumerate(model.layers):
        rows = torch.as_tensor(union[i]) if classes else torch.zeros(layer.out_features, dtype=torch.bool)
        tensors[f"layers.{i}.weight"] = layer.weight.detach()[rows].numpy().astype(dtype)
        tensors[f"layers.{i}.bias"] = layer.bias.detach()[rows].numpy().astype(dtype)
    return tensors


def decode_subnetworks(model: MLP, classes: list[int], payload: Payload) -> tuple[dict[int, UnitMasks], dict[str, torch.Tensor]]:
    """Inverse of ``encode_subnetworks``, checked against the local model's shapes."""
    sizes = [l.out_features for l in model.layers]
    packed = expect_array(payload, "units", (len(classes), -(-sum(sizes) // 8)), kinds="u")
    if packed.dtype != np.uint8:
        raise ArtifactError(f"tensor 'units' has dtype {packed.dtype}, expected uint8 (packed bits)")
    bits = np.unpackbits(packed, axis=1, count=sum(sizes)).astype(bool)
    splits = np.cumsum(sizes)[:-1]
    units = {c: [np.array(part, dtype=bool) for part in np.split(bits[j], splits)]
             for j, c in enumerate(classes)}
    union = union_units(units) if classes else [np.zeros(s, dtype=bool) for s in sizes]
    values: dict[str, torch.Tensor] = {}
    for i, layer in enumerate(model.layers):
        n = int(union[i].sum())
        w = expect_array(payload, f"layers.{i}.weight", (n, layer.in_features))
        b = expect_array(payload, f"layers.{i}.bias", (n,))
        dense_w = torch.zeros_like(layer.weight, dtype=torch.float32)
        dense_b = torch.zeros_like(layer.bias, dtype=torch.float32)
        rows = torch.as_tensor(union[i])
        dense_w[rows] = torch.from_numpy(np.array(w, dtype=np.float32))
        dense_b[rows] = torch.from_numpy(np.array(b, dtype=np.float32))
        values[f"layers.{i}.weight"], values[f"layers.{i}.bias"] = dense_w, dense_b
    return units, values


@register
class FedSub(Algorithm):
    name = "fedsub"
    message_kind = "fedsub/artifacts"
    Options = FedSubOptions
    options: FedSubOptions

    def __init__(self, ctx, options) -> None:
        super().__init__(ctx, options)
        self.own: Artifacts | None = None
        self.parsed: dict = {}   # the parsed artifacts, under the same keys as ``cache``
        self.clusterings: ClusteringCache = ctx.shared.setdefault("clustering", ClusteringCache())
        self.last_k: dict[int, int] = {}
        self.last_predicted: int = 0  # classes fused at the last fusion thanks to a predicted prototype

    # -- client side (Alg. 1) --------------------------------------------------------------
    def _reliability(self, classes: np.ndarray, counts: np.ndarray) -> list[float]:
        kind = self.options.score
        if kind == "equal":
            return [1.0] * len(classes)
        acc = per_class_accuracy(self.ctx.model, self.ctx.x_train, self.ctx.y_train,
                                 self.ctx.num_classes)[classes]
        if kind == "size":
            return [float(c) for c in counts]
        if kind == "accuracy":
            return [float(a) for a in acc]
        return [float(c * a) for c, a in zip(counts, acc)]

    def _extract(self) -> tuple[Artifacts, np.ndarray]:
        model, x, y = self.ctx.model, self.ctx.x_train, self.ctx.y_train
        classes, protos, counts = class_prototypes(model, x, y, self.ctx.num_classes)
        units = extract_unit_masks(self.options.extraction, model, x, y, classes)
        values = {n: p.detach().clone() for n, p in model.named_parameters()}
        own = Artifacts(classes=[int(c) for c in classes], prototypes=protos,
                        scores=self._reliability(classes, counts), values=values, units=units)
        return own, counts

    def share(self, round: int) -> Payload:
        self.own, counts = self._extract()
        o = self.options
        shared_protos = perturb(self.own.prototypes, o.proto_noise, self.ctx.rng, sigma=o.proto_noise_sigma,
                                epsilon=o.proto_noise_epsilon, sensitivity=o.proto_noise_sensitivity)
        tensors = {"prototypes": shared_protos,
                   **encode_subnetworks(self.ctx.model, self.own.units, self.options.float16)}
        meta = {"classes": self.own.classes, "counts": [int(c) for c in counts],
                "scores": self.own.scores}
        return Payload(meta=meta, tensors=tensors)

    def share_parts(self, round: int) -> list[Payload]:
        """Prototypes first (a few kB), then the subnetworks (most of the model), as separate messages."""
        whole = self.share(round)
        protos = {"prototypes": whole.tensors["prototypes"]}
        rest = {k: v for k, v in whole.tensors.items() if k != "prototypes"}
        return [Payload({**whole.meta, "part": "prototypes"}, protos),
                Payload({**whole.meta, "part": "subnetworks"}, rest)]

    def stats(self) -> dict:
        """The K that the DBI sweep chose per class at the last fusion (mean over devices), and how
        many classes were fused from a predicted prototype."""
        out: dict = {"chosen_k_by_class": dict(self.last_k)} if self.last_k else {}
        if self.options.predict_missing:
            out["predicted_classes_fused"] = self.last_predicted
        return out

    def state_dict(self) -> dict[str, Any]:
        """Besides the base state: this device's own artifacts of its last share (its side of the
        next fusion) and the statistics of its last fusion. Parsed peer artifacts are rebuilt
        from the cache on load, and clusterings are a memo keyed on content."""
        own = self.own
        own_state = None if own is None else {
            "classes": list(own.classes), "prototypes": array_state(own.prototypes),
            "scores": list(own.scores), "values": {k: v.clone() for k, v in own.values.items()},
            "units": {c: [array_state(u) for u in masks] for c, masks in own.units.items()}}
        return {**super().state_dict(), "own": own_state, "last_k": dict(self.last_k),
                "last_predicted": self.last_predicted}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.parsed.clear()
        super().load_state_dict(state)
        own = state["own"]
        self.own = None if own is None else Artifacts(
            classes=list(own["classes"]), prototypes=array_from_state(own["prototypes"]),
            scores=list(own["scores"]), values={k: v.clone() for k, v in own["values"].items()},
            units={int(c): [array_from_state(u) for u in masks] for c, masks in own["units"].items()})
        self.last_k = {int(c): int(k) for c, k in state["last_k"].items()}
        self.last_predicted = int(state["last_predicted"])

    # -- receiving -------------------------------------------------------------------------
    def _parse(self, payload: Payload) -> Artifacts:
        classes, scores = payload.meta.get("classes"), payload.meta.get("scores")
        nc = self.ctx.num_classes
        if (not isinstance(classes, list) or not all(isinstance(c, int) and 0 <= c < nc for c in classes)
                or len(set(classes)) != len(classes)):
            raise ArtifactError(f"meta 'classes' must be distinct class ids in 0..{nc - 1}, got {classes!r}")
        if (not isinstance(scores, list) or len(scores) != len(classes)
                or not all(isinstance(s, (int, float)) and np.isfinite(s) and s >= 0 for s in scores)):
            raise ArtifactError("meta 'scores' must be one finite score >= 0 per class")
        part = payload.meta.get("part", "whole")
        if part not in PARTS:
            raise ArtifactError(f"meta 'part' must be one of {', '.join(PARTS)}, got {part!r}")
        protos = units = values = None
        if part != "subnetworks":
            feat_dim = self.ctx.model.layers[-1].in_features
            protos = np.array(expect_array(payload, "prototypes", (len(classes), feat_dim)), dtype=np.float32)
        if part != "prototypes":
            units, values = decode_subnetworks(self.ctx.model, classes, payload)
        return Artifacts(classes=classes, prototypes=protos, scores=[float(s) for s in scores],
                         values=values, units=units)

    def check_payload(self, payload: Payload) -> None:
        self._parse(payload)

    def receive(self, item: Received) -> None:
        """Keep the newest artifacts per peer (per peer and part when they come in parts)."""
        parsed = self._parse(item.payload)
        part = item.payload.meta.get("part", "whole")
        key = item.sender if part == "whole" else (item.sender, part)
        old = self.cache.get(key)
        if old is None or (item.round, item.sent_at) >= (old.round, old.sent_at):
            self.cache[key] = item
            self.parsed[key] = parsed

    @property
    def peers(self) -> dict[int, Artifacts]:
        """Per peer: the newest prototypes and the newest subnetworks, from whichever parts hold them."""
        newest: dict[tuple[int, str], tuple[tuple, Artifacts]] = {}
        for key, art in self.parsed.items():
            item = self.cache[key]
            sender = item.sender
            for field, present in (("prototypes", art.prototypes is not None), ("values", art.values is not None)):
                old = newest.get((sender, field))
                if present and (old is None or (item.round, item.sent_at) > old[0]):
                    newest[sender, field] = ((item.round, item.sent_at), art)
        peers = {}
        for (sender, field), (_, art) in newest.items():
            if field == "prototypes":
                sub = newest.get((sender, "values"))
                peers[sender] = Artifacts(art.classes, art.prototypes, art.scores,
                                          sub[1].values if sub else None, sub[1].units if sub else None)
        return peers

    # -- the server's part, on the device (Alg. 2) -----------------------------------------
    def _fusable(self, units: UnitMasks) -> UnitMasks:
        if self.options.depth == "full":
            return units
        return [u if i < self.options.shared_layers else np.zeros_like(u) for i, u in enumerate(units)]

    def fuse(self, round: int, now: float) -> None:
        self.drop_stale(now, self.options.cache_max_age_s)
        for key in [k for k in self.parsed if k not in self.cache]:
            del self.parsed[key]
        peers = self.peers
        if self.own is None or not peers:
            return
        me = self.ctx.device_id
        view = {me: self.own, **peers}
        held = {m: {c: a.prototypes[j] for j, c in enumerate(a.classes)} for m, a in view.items()}
        predicted = predict_missing(held, self.options.predict_neighbors) if self.options.predict_missing else {}
        fuse_fn = FUSIONS[self.options.fusion]
        model = self.ctx.model
        updates = []
        self.last_predicted = 0
        # Alg. 3 then clustering: members with a real or a predicted prototype for c are
        # clustered; only those with real data for c have a subnetwork to fuse. Every class's
        # K sweep runs in one batched call (equal to one call per class).
        classes = sorted(set(self.own.classes) | set(predicted.get(me, {})))
        members_of = {c: sorted(m for m in view if c in held[m] or c in predicted.get(m, {})) for c in classes}
        point_sets = [np.stack([held[m][c] if c in held[m] else predicted[m][c] for m in members_of[c]])
                      for c in classes]
        clusterings = self.clusterings.cluster_many(point_sets, k_max=self.options.max_k,
                                                    n_init=self.options.kmeans_n_init,
                                                    min_cluster_size=self.options.min_cluster_size)
        for c, clustering in zip(classes, clusterings, strict=True):
            members = members_of[c]
            self.last_k[c] = clustering.k
            my_label = clustering.labels[members.index(me)]
            # A peer known only by its prototypes shapes the clusters but has no parameters to give.
            mates = [view[m] for m, lab in zip(members, clustering.labels)
                     if lab == my_label and c in held[m] and view[m].values is not None and c in view[m].units]
            if not mates:
                continue
            self.last_predicted += c not in held[me]
            values = [a.values for a in mates]
            masks = [parameter_masks(model, self._fusable(a.units[c])) for a in mates]
            scores = [a.scores[a.classes.index(c)] for a in mates]
            updates.append(fuse_fn(values, masks, scores))
        own_params = {n: p.detach() for n, p in model.named_parameters()}
        new, _changed = combine_cluster_updates(own_params, updates)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(new[n])
        self.take_fresh()
