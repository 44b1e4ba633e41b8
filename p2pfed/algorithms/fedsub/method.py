"""``fedsub``: FedSub without a server — class prototypes and class subnetworks, fused per class.

Follows *FedSub: Introducing Class-aware Subnetworks Fusion to Enhance Personalized Federated
Learning* (the journal version, Sec. 3) and Campana and Delmastro, *FedSub: Introducing
class-aware Subnetworks Fusion to Enhance Personalized Federated Learning in Ubiquitous Systems*
(the ubiquitous version, Alg. 1-3). Every round a device trains E local epochs (Alg. 1 l.2),
holds one prototype per class (``prototypes: input``, the default: the class mean of its input
data, ubiquitous Alg. 1 l.5, recomputed only when its local data change, journal Sec. 3.1;
``embedding``: the mean penultimate feature, recomputed every round), a reliability score per
class (l.5) and one subnetwork per class (Eq. 2 naive activations, or Eq. 4-5 LRP), and shares
them. The server's part (Alg. 2) runs on every device over its own and its cached peers'
artifacts: per class, K-means on the prototypes with K chosen by the Davies–Bouldin index, then
fusion of the cluster-mates' subnetworks (Eq. 9-10 *Overlapping Components* by default; Eq. 6-7
cluster average, Eq. 8 leadership), and only the fused parameters change (l.13).

The K rule: the journal's text sweeps K from 2 up to the number of prototypes (``k_rule:
literal``), which on real prototypes picks K = n-1 — singleton clusters, so every fusion rule is
the identity — while the papers' results (fusion rules and scores ranked apart) need clusters
with several members. The default ``min-size`` only lets partitions whose clusters all have
``min_cluster_size`` (2) members win; this bound is inferred from the papers' results, not
written in them. ``algorithm_stats`` reports the chosen K next to the literal rule's.

Optionally (ubiquitous version, Alg. 3) the prototypes members lack are first predicted by
collaborative filtering, so a device is also clustered, and fused, for classes it has no data for
yet (``predict_for: own``: only for its own training classes hidden for now, not classes it will
never have); and optionally (journal Sec. 3.3) shared prototypes carry Gaussian or Laplace noise (drawn
once per prototype computation, so repeating an unchanged prototype does not average it away).

Serverless adaptations: the cache holds the newest artifacts per *peer that reached this device*
(neighbours, or carriers of them), so each device clusters its own view; all devices start from
the same initial weights (a shared seed), as a server's first broadcast would give them.
``exchange: broadcast`` sends every artifact to every neighbour; under intermittent contacts the
share travels as a tiny prototype part and a larger subnetwork part (``share`` returns both;
where links never cut a transfer the runtime sends them as one message).
``exchange: two-phase`` (fewer bytes, journal Sec. 6's future work) sends the prototypes to all,
with this device's *requests* — per peer, the classes for which that peer is its cluster-mate —
and sends each peer only the subnetworks it requested, addressed to it (``meta['to']``).
On the wire a device sends the rows of the union of the sent class subnetworks once, plus one
bit per unit and class (see ``encode_subnetworks``), instead of one masked copy of the model per
class; ``algorithm_stats`` reports both byte counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, cast

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from p2pfed.algorithms.base import (NOT_READY, Algorithm, ArtifactError, Deferred, DeviceContext, FusionWork,
                                    Payload, Received, UnitOptions, expect_array, require_units)
from p2pfed.algorithms.registry import register
from p2pfed.algorithms.state import array_from_state, array_state
from p2pfed.algorithms.fedsub.clustering import Clustering, ClusteringCache
from p2pfed.algorithms.fedsub.collaborative import predict_missing
from p2pfed.learning.batched_fusion import FusionJob
from p2pfed.algorithms.fedsub.outliers import inliers
from p2pfed.algorithms.fedsub.robust_rows import RobustCount, robust_class_rows
from p2pfed.algorithms.fedsub.row_fusion import ClassCluster, row_fusion_job
from p2pfed.algorithms.robust import RobustOptions
from p2pfed.learning.model import feature_dim
from p2pfed.learning.units import UnitLayer, unit_layers
from p2pfed.algorithms.fedsub.privacy import perturb
from p2pfed.learning.prototypes import class_means, class_prototypes
from p2pfed.algorithms.fedsub.subnetworks import EXTRACTORS, UnitMasks, extract_unit_masks, union_units
from p2pfed.learning.training import per_class_accuracy


class FedSubOptions(UnitOptions, RobustOptions):
    extraction: str = Field("naive", description="subnetwork extraction rule")
    fusion: Literal["overlap", "cluster-avg", "leadership"] = "overlap"
    score: Literal["equal", "size", "accuracy", "size-accuracy"] = "equal"
    depth: Literal["full", "partial"] = "full"
    shared_layers: int = Field(2, ge=1, description="layers fused when depth is partial")
    prototypes: Literal["input", "embedding"] = Field(
        "input", description="class means of the input data (papers) or of the penultimate features")
    k_rule: Literal["min-size", "half", "literal"] = Field(
        "min-size", description="which DBI partitions may win (see clustering.choose_k_by_dbi_many)")
    max_k: int | None = Field(None, ge=2, description="upper bound of the K sweep")
    kmeans_n_init: int = Field(4, ge=1)
    min_cluster_size: int = Field(2, ge=1, description="smallest cluster the min-size rule accepts")
    exchange: Literal["broadcast", "two-phase"] = Field(
        "broadcast", description="send everything to all, or prototypes first and subnetworks on request")
    cache_max_age_s: float | None = Field(None, gt=0, description="drop cached artifacts older than this")
    predict_missing: bool = Field(False, description="predict absent prototypes (ubiquitous Alg. 3)")
    predict_neighbors: int = Field(3, ge=1, description="n most similar members in Eq. 2")
    predict_for: Literal["all", "own"] = Field(
        "all", description="classes a device predicts its own prototype for: every class a peer holds "
                           "(Alg. 3 as written) or only its own training classes hidden for now (dynamic data)")
    proto_outliers: Literal["none", "trim"] = Field(
        "none", description="leave prototypes far from all others out of each class's clustering (outliers.py)")
    proto_outlier_factor: float = Field(3.0, gt=0, description="trim: times the median nearest-neighbour distance")
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

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "float16" in data:
            raise ValueError("float16: replaced by engine.precision: float16, which sends every method's "
                             "tensors (FedSub's prototypes too) at that precision, so bytes compare fairly")
        return data

    @model_validator(mode="after")
    def _robust_needs_mates(self) -> FedSubOptions:
        """Leadership takes one mate's rows: there is nothing to combine robustly."""
        if self.robust != "none" and self.fusion == "leadership":
            raise ValueError(f"robust {self.robust!r} combines cluster-mates' rows: use fusion overlap or "
                             "cluster-avg, not leadership")
        return self

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
    """One device's class-level artifacts, decoded into dense per-parameter form. Never modified
    once built: what a fusion reads from them per class is worked out once and kept."""

    classes: list[int]
    prototypes: np.ndarray | None       # (C, d); None when only the subnetwork part arrived
    scores: list[float]
    values: dict[str, torch.Tensor] | None  # dense parameters, zero outside the union of subnetworks
    units: dict[int, UnitMasks] | None      # class -> unit mask per layer
    requests: dict[int, list[int]] | None = None  # two-phase: peer -> classes it asks that peer for
    # with_subnetworks' results: id of the other part -> (that part, the merged artifacts)
    _merged: dict[int, tuple[Artifacts | None, Artifacts]] = field(default_factory=dict, repr=False, compare=False)

    def with_subnetworks(self, other: Artifacts | None) -> Artifacts:
        """These prototypes with ``other``'s subnetworks (None: none). One object per pair, kept
        here: the receivers of both parts share this one (parsed once per message), so they
        share the merged artifacts too, and what a fusion works out from them once."""
        if other is self:
            return self
        key = id(other)
        kept = self._merged.get(key)
        if kept is None or kept[0] is not other:
            kept = self._merged[key] = (other, Artifacts(
                self.classes, self.prototypes, self.scores, other.values if other else None,
                other.units if other else None))
        return kept[1]

    @cached_property
    def prototype_of(self) -> dict[int, np.ndarray]:
        """Class -> its prototype (empty without a prototype part)."""
        return {} if self.prototypes is None else dict(zip(self.classes, self.prototypes))

    @cached_property
    def score_of(self) -> dict[int, float]:
        return dict(zip(self.classes, self.scores))

    @cached_property
    def unit_row(self) -> dict[int, np.ndarray]:
        """Class -> its unit mask, every layer's units end to end (empty without subnetworks)."""
        return {} if self.units is None else {c: np.concatenate(m) for c, m in self.units.items()}


PARTS = ("whole", "prototypes", "subnetworks")


def encode_subnetworks(params: dict[str, torch.Tensor], layers: list[UnitLayer],
                       units: dict[int, UnitMasks]) -> dict[str, np.ndarray]:
    """Rows of the union of the class subnetworks (sent once: every parameter of a kept unit,
    ``learning/units.py``) plus one bit per unit and class, as float32 (the wire precision,
    ``engine.precision``, is the transport's, for every method)."""
    classes = sorted(units)
    union = union_units(units)
    dtype = np.float32
    total = sum(layer.size for layer in layers)
    bits = (np.stack([np.concatenate(units[c]) for c in classes]).astype(bool) if classes
            else np.zeros((0, total), dtype=bool))
    tensors: dict[str, np.ndarray] = {"units": np.packbits(bits, axis=1)}   # 8 units per byte
    for i, layer in enumerate(layers):
        rows = torch.as_tensor(union[i]) if classes else torch.zeros(layer.size, dtype=torch.bool)
        for name in layer.params:
            tensors[name] = params[name].detach()[rows].numpy().astype(dtype)
    return tensors


def decode_subnetworks(layers: list[UnitLayer], classes: list[int], payload: Payload
                       ) -> tuple[dict[int, UnitMasks], dict[str, torch.Tensor]]:
    """Inverse of ``encode_subnetworks``, checked against the local model's shapes. What it
    builds from the arrays (unit masks, the dense copy) goes into ``payload.memo``: the receivers
    of a broadcast in the simulators share it (read-only), each checking the arrays' shapes
    against its own model first."""
    sizes = tuple(layer.size for layer in layers)
    packed = expect_array(payload, "units", (len(classes), -(-sum(sizes) // 8)), kinds="u")
    if packed.dtype != np.uint8:
        raise ArtifactError(f"tensor 'units' has dtype {packed.dtype}, expected uint8 (packed bits)")
    key = ("fedsub/subnetworks", tuple(classes), tuple(layers))
    decoded = payload.remember(key, lambda: _DecodedUnits(packed, classes, sizes))
    sent = [{name: expect_array(payload, name, (n, *shape)) for name, shape in zip(layer.params, layer.row_shapes)}
            for layer, n in zip(layers, decoded.row_counts)]
    return decoded.units, decoded.dense(layers, sent)


class _DecodedUnits:
    """A subnetwork message's unit masks, and (built on first use) its dense copy: parameters
    zero outside the rows sent. Shared by the message's receivers: never modified."""

    def __init__(self, packed: np.ndarray, classes: list[int], sizes: tuple[int, ...]) -> None:
        bits = np.unpackbits(packed, axis=1, count=sum(sizes)).astype(bool)
        bits.flags.writeable = False   # the class masks are views into it
        spans = list(zip(np.cumsum([0, *sizes[:-1]]), np.cumsum(sizes)))
        self.units = {c: [bits[j, a:b] for a, b in spans] for j, c in enumerate(classes)}
        any_class = cast(np.ndarray, bits.any(axis=0))
        self.rows = [any_class[a:b] for a, b in spans]
        self.row_counts = [int(r.sum()) for r in self.rows]
        self._dense: dict[str, torch.Tensor] | None = None

    def dense(self, layers: list[UnitLayer], sent: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        if self._dense is None:
            values: dict[str, torch.Tensor] = {}
            for i, (layer, arrays) in enumerate(zip(layers, sent)):
                for name, shape in zip(layer.params, layer.row_shapes):
                    dense = np.zeros((layer.size, *shape), dtype=np.float32)
                    dense[self.rows[i]] = arrays[name]
                    values[name] = torch.from_numpy(dense)
            self._dense = values
        return self._dense


@dataclass
class ClassPrototypes:
    """A device's prototypes as last computed: clean (its own clustering) and as shared (noisy)."""

    classes: np.ndarray
    prototypes: np.ndarray
    counts: np.ndarray
    shared: np.ndarray
    visible: list[int] | None    # the visible classes they were computed for (input space)


@dataclass(frozen=True)
class _FusionView:
    """What one fusion clusters: the devices in view, their held prototypes per class, and per
    class the members clustered and their points (held or predicted)."""

    view: dict[int, Artifacts]
    held: dict[int, dict[int, np.ndarray]]
    classes: list[int]
    members_of: dict[int, list[int]]
    point_sets: list[np.ndarray]


STAT_COUNTERS = ("clusterings", "k_sum", "literal_k_sum", "cluster_size_sum", "class_fusions",
                 "mate_fusions", "subnet_messages", "subnet_bytes", "paper_style_bytes",
                 "robust_groups", "robust_candidates", "robust_set_aside", "outliers_trimmed",
                 "subnetworks_extracted")


@register
class FedSub(Algorithm[FedSubOptions]):
    name = "fedsub"
    message_kind = "fedsub/artifacts"
    parts = PARTS

    def __init__(self, ctx: DeviceContext, options: FedSubOptions) -> None:
        super().__init__(ctx, options)
        self.model = require_units(ctx, self.name)   # ctx.model, which must have units (MLP, CNN)
        self.layers = unit_layers(self.model)
        self.own: Artifacts | None = None
        # One memo of K sweeps for every device in the process (content-keyed).
        self.clusterings: ClusteringCache = ctx.shared.setdefault("fedsub/clustering", ClusteringCache())
        self.clusterings.reserve(ctx.num_classes)
        self.last_k: dict[int, int] = {}
        # each class's last clustering of the view: class -> {device id: cluster label}
        self.last_clusters: dict[int, dict[int, int]] = {}
        self.last_predicted: int = 0  # classes fused at the last fusion thanks to a predicted prototype
        self.protos: ClassPrototypes | None = None
        self.requests: dict[int, list[int]] = {}   # two-phase: peer -> classes to pull from it
        self.counters: dict[str, int] = dict.fromkeys(STAT_COUNTERS, 0)
        self.kept_by_layer = [0] * len(self.layers)   # units kept, summed over extracted class subnetworks

    @cached_property
    def prototype_dim(self) -> int:
        return (int(self.ctx.x_train.shape[1]) if self.options.prototypes == "input"
                else feature_dim(self.model, self.ctx.model_name))

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

    def _prototypes(self) -> ClassPrototypes:
        """Input space: computed once per local dataset (journal Sec. 3.1: "updated whenever the
        local dataset changes"), noise included; embedding space: every round."""
        ctx, o = self.ctx, self.options
        visible = None if ctx.visible_classes is None else sorted(ctx.visible_classes)
        if o.prototypes == "input" and self.protos is not None and self.protos.visible == visible:
            return self.protos
        if o.prototypes == "input":
            classes, protos, counts = class_means(ctx.x_train, ctx.y_train, ctx.num_classes)
        else:
            classes, protos, counts = class_prototypes(self.model, ctx.x_train, ctx.y_train, ctx.num_classes)
        shared = perturb(protos, o.proto_noise, ctx.rng, sigma=o.proto_noise_sigma,
                         epsilon=o.proto_noise_epsilon, sensitivity=o.proto_noise_sensitivity)
        self.protos = ClassPrototypes(classes, protos, counts, shared, visible)
        return self.protos

    def _extract(self) -> ClassPrototypes:
        model, x, y = self.model, self.ctx.x_train, self.ctx.y_train
        protos = self._prototypes()
        units = extract_unit_masks(self.options.extraction, model, x, y, protos.classes)
        for masks in units.values():
            self.kept_by_layer = [k + int(np.count_nonzero(m)) for k, m in zip(self.kept_by_layer, masks)]
        self.counters["subnetworks_extracted"] += len(units)
        values = {n: p.detach().clone() for n, p in model.named_parameters()}
        self.own = Artifacts(classes=[int(c) for c in protos.classes], prototypes=protos.prototypes,
                             scores=self._reliability(protos.classes, protos.counts), values=values,
                             units=units)
        return protos

    def _subnetwork_tensors(self, classes: list[int]) -> dict[str, np.ndarray]:
        """The encoded subnetworks of ``classes``, counted in both byte accountings."""
        own = self.own
        assert own is not None and own.units is not None   # set by the share's extraction
        units = {c: own.units[c] for c in classes}
        tensors = encode_subnetworks(dict(self.model.named_parameters()), self.layers, units)
        value_bytes = 4   # both accountings at float32; the wire's bytes (engine.precision) are in comm
        self.counters["subnet_messages"] += 1
        self.counters["subnet_bytes"] += sum(int(t.nbytes) for t in tensors.values())
        # The papers' accounting (journal Fig. 6): each class's subnetwork counted on its own.
        self.counters["paper_style_bytes"] += value_bytes * sum(
            int(np.count_nonzero(u)) * layer.row_width   # a kept unit: its weight row and bias (and BN's)
            for c in classes for layer, u in zip(self.layers, units[c]))
        return tensors

    def _meta(self, protos: ClassPrototypes, classes: list[int] | None = None) -> dict[str, Any]:
        own = self.own
        assert own is not None
        keep = own.classes if classes is None else classes
        idx = [own.classes.index(c) for c in keep]
        return {"classes": list(keep), "counts": [int(protos.counts[j]) for j in idx],
                "scores": [own.scores[j] for j in idx]}

    def share(self, round: int) -> list[Payload]:
        """Prototypes (a few kB) and subnetworks (most of the model) as two parts, so that a
        short contact can still deliver the prototypes (elsewhere they travel as one message);
        two-phase: the prototypes to all, with this device's requests, and to each peer only the
        subnetworks it requested, addressed to it."""
        protos = self._extract()
        assert self.own is not None
        if self.options.exchange == "broadcast":
            meta = self._meta(protos)
            return [Payload({**meta, "part": "prototypes"}, {"prototypes": protos.shared}),
                    Payload({**meta, "part": "subnetworks"}, self._subnetwork_tensors(self.own.classes))]
        requests = {str(peer): classes for peer, classes in sorted(self.requests.items())}
        parts = [Payload({**self._meta(protos), "part": "prototypes", "requests": requests},
                         {"prototypes": protos.shared})]
        for peer, wanted in self._requested_from_me().items():
            parts.append(Payload({**self._meta(protos, wanted), "part": "subnetworks", "to": peer},
                                 self._subnetwork_tensors(wanted)))
        return parts

    def _requested_from_me(self) -> dict[int, list[int]]:
        """Per peer that can be reached now, the classes it asked this device for (and it holds)."""
        assert self.own is not None
        me, mine = self.ctx.device_id, set(self.own.classes)
        reachable = set(self.ctx.neighbours()) if self.ctx.neighbours is not None else None
        out: dict[int, list[int]] = {}
        for key, item in sorted(self.cache.items(), key=lambda kv: _key_order(kv[0])):
            sender, art = item.sender, item.parsed
            if art.requests is None or (reachable is not None and sender not in reachable):
                continue
            wanted = sorted(set(art.requests.get(me, [])) & mine)
            if wanted:
                out[sender] = wanted
        return out

    def stats(self) -> dict[str, Any]:
        """Over the whole run: the K chosen per class clustering next to the literal rule's, this
        device's cluster size (itself included), how often a class fusion had >= 1 cluster-mate's
        subnetwork, the share of each layer's units (neurons, channels) a class subnetwork keeps,
        and the mean subnetwork message's tensor bytes in our encoding (the union of
        the class subnetworks once) and in the papers' accounting (each class counted apart)."""
        n = self.counters
        out: dict[str, Any] = {"chosen_k_by_class": dict(self.last_k)} if self.last_k else {}
        if n["clusterings"]:
            out["k_mean"] = n["k_sum"] / n["clusterings"]
            out["literal_k_mean"] = n["literal_k_sum"] / n["clusterings"]
            out["cluster_size_mean"] = n["cluster_size_sum"] / n["clusterings"]
        if n["class_fusions"]:
            out["fusions_with_mate_fraction"] = n["mate_fusions"] / n["class_fusions"]
        if n["subnetworks_extracted"]:
            out["subnetwork_kept_fraction_by_layer"] = {   # keyed by the layer's module: layers.0, body.4, head
                layer.params[0].rpartition(".")[0]: kept / (n["subnetworks_extracted"] * layer.size)
                for kept, layer in zip(self.kept_by_layer, self.layers)}
        if n["subnet_messages"]:
            out["subnet_message_bytes"] = n["subnet_bytes"] / n["subnet_messages"]
            out["subnet_message_bytes_paper_style"] = n["paper_style_bytes"] / n["subnet_messages"]
        if self.options.predict_missing:
            out["predicted_classes_fused"] = self.last_predicted
        if self.options.proto_outliers != "none" and n["clusterings"]:
            out["prototype_outliers_per_clustering"] = n["outliers_trimmed"] / n["clusterings"]
        if self.options.robust != "none":
            out["robust_row_groups"] = n["robust_groups"]
            peers = n["robust_candidates"] - n["robust_groups"]   # every group's first candidate is the own row
            out["robust_peer_rows_set_aside_fraction"] = n["robust_set_aside"] / peers if peers else 0.0
        return out

    def cluster_mates(self) -> dict[int, list[int]]:
        """Per class, the peers this device shared a cluster with at its last clustering of that
        class (read by ``summary.json`` ``adversaries`` to count clusters a liar got into)."""
        me = self.ctx.device_id
        return {c: sorted(m for m, lab in labels.items() if m != me and lab == labels[me])
                for c, labels in sorted(self.last_clusters.items()) if me in labels}

    def state_dict(self) -> dict[str, Any]:
        """Besides the base state: this device's own artifacts of its last share (its side of the
        next fusion), its prototypes as shared, its requests, its last clustering per class and
        its statistics. Parsed peer artifacts are rebuilt from the cache on load, and clusterings
        are a memo keyed on content."""
        own, protos = self.own, self.protos
        own_state = None if own is None else {
            "classes": list(own.classes), "prototypes": array_state(own.prototypes),
            "scores": list(own.scores),
            "values": {k: v.clone() for k, v in cast("dict[str, torch.Tensor]", own.values).items()},
            "units": {c: [array_state(u) for u in masks]
                      for c, masks in cast("dict[int, UnitMasks]", own.units).items()}}
        protos_state = None if protos is None else {
            "classes": array_state(protos.classes), "prototypes": array_state(protos.prototypes),
            "counts": array_state(protos.counts), "shared": array_state(protos.shared),
            "visible": protos.visible}
        return {**super().state_dict(), "own": own_state, "last_k": dict(self.last_k),
                "last_clusters": {c: dict(labels) for c, labels in self.last_clusters.items()},
                "last_predicted": self.last_predicted, "protos": protos_state,
                "requests": {p: list(c) for p, c in self.requests.items()}, "counters": dict(self.counters),
                "kept_by_layer": list(self.kept_by_layer)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        own = state["own"]
        self.own = None if own is None else Artifacts(
            classes=list(own["classes"]), prototypes=array_from_state(own["prototypes"]),
            scores=list(own["scores"]), values={k: v.clone() for k, v in own["values"].items()},
            units={int(c): [array_from_state(u) for u in masks] for c, masks in own["units"].items()})
        self.last_k = {int(c): int(k) for c, k in state["last_k"].items()}
        self.last_clusters = {int(c): {int(m): int(lab) for m, lab in labels.items()}
                              for c, labels in state.get("last_clusters", {}).items()}
        self.last_predicted = int(state["last_predicted"])
        p = state["protos"]
        self.protos = None if p is None else ClassPrototypes(
            array_from_state(p["classes"]), array_from_state(p["prototypes"]), array_from_state(p["counts"]),
            array_from_state(p["shared"]), None if p["visible"] is None else list(p["visible"]))
        self.requests = {int(k): list(v) for k, v in state["requests"].items()}
        self.counters = {k: int(state["counters"].get(k, 0)) for k in STAT_COUNTERS}
        self.kept_by_layer = [int(k) for k in state.get("kept_by_layer", [0] * len(self.layers))]

    # -- receiving -------------------------------------------------------------------------
    def _parse(self, payload: Payload) -> Artifacts:
        """The message's artifacts, checked against this device's model. Every receiver with the
        same model shapes would check the same arrays the same way, so in the simulators (where
        a broadcast's receivers share ``payload.memo``) the checked result is built once per
        message and model shape and shared, read-only; only the addressee check is per device."""
        to = payload.meta.get("to")
        if to is not None and to != self.ctx.device_id:
            raise ArtifactError(f"meta 'to' addresses peer {to!r}, not this peer ({self.ctx.device_id})")
        return payload.remember(self._parse_key, lambda: self._parse_checked(payload))

    @cached_property
    def _parse_key(self) -> tuple[Any, ...]:
        """What a check of a message depends on besides the message (the model's shapes are
        fixed for a run)."""
        return ("fedsub/parse", self.ctx.num_classes, self.options.prototypes, self.prototype_dim,
                tuple(self.layers))

    def _parse_checked(self, payload: Payload) -> Artifacts:
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
        protos = units = values = requests = None
        if part != "subnetworks":
            protos = np.array(expect_array(payload, "prototypes", (len(classes), self.prototype_dim)),
                              dtype=np.float32)
            protos.setflags(write=False)   # shared by the message's receivers
            requests = _parse_requests(payload.meta.get("requests", {}), nc)
        if part != "prototypes":
            units, values = decode_subnetworks(self.layers, classes, payload)
        return Artifacts(classes=classes, prototypes=protos, scores=[float(s) for s in scores],
                         values=values, units=units, requests=requests)

    def check(self, payload: Payload) -> Artifacts:
        return self._parse(payload)

    @property
    def peers(self) -> dict[int, Artifacts]:
        """Per peer in the cache: its newest prototypes with its newest subnetworks, from
        whichever parts hold them (a peer known only by its subnetworks is not in the view: it
        cannot be clustered)."""
        cache = cast("dict[int | tuple[int, str], Received]", self.cache)   # keyed by peer, or (peer, part)
        senders = sorted({k[0] if isinstance(k, tuple) else k for k in cache})
        merged = {s: self._merged_peer(s) for s in senders}
        return {s: art for s, art in merged.items() if art is not None}

    def _merged_peer(self, sender: int) -> Artifacts | None:
        newest: dict[str, tuple[tuple[int, float], Artifacts]] = {}
        for key in (sender, (sender, "prototypes"), (sender, "subnetworks")):
            item = self.cache.get(key)
            if item is None:
                continue
            art: Artifacts = item.parsed
            for part, present in (("prototypes", art.prototypes is not None), ("values", art.values is not None)):
                old = newest.get(part)
                if present and (old is None or (item.round, item.sent_at) > old[0]):
                    newest[part] = ((item.round, item.sent_at), art)
        if "prototypes" not in newest:
            return None
        art, sub = newest["prototypes"][1], newest.get("values")
        return art.with_subnetworks(sub[1] if sub else None)

    # -- the server's part, on the device (Alg. 2) -----------------------------------------
    def _fusable(self, rows: np.ndarray) -> np.ndarray:
        """Unit masks (members × rows) with the layers past ``shared_layers`` cleared (partial depth)."""
        if self.options.depth == "full":
            return rows
        shared = sum(layer.size for layer in self.layers[:self.options.shared_layers])
        kept = rows.copy()
        kept[:, shared:] = False
        return kept

    def _fusion_view(self, now: float) -> _FusionView | None:
        """After the TTL: the devices in view (this one and its peers), their prototypes held or
        predicted (Alg. 3), and each class's clustering problem; None: no peer to fuse with."""
        self.drop_stale(now, self.options.cache_max_age_s)
        peers = self.peers
        if self.own is None or not peers:
            return None
        me, o = self.ctx.device_id, self.options
        view = {me: self.own, **peers}
        held = {m: a.prototype_of for m, a in view.items()}
        predicted = predict_missing(held, o.predict_neighbors) if o.predict_missing else {}
        if o.predict_for == "own" and me in predicted:   # not classes this device will never have
            predicted[me] = {c: p for c, p in predicted[me].items() if c in self._training_classes}
        # members with a real or a predicted prototype for c are clustered; only those with real
        # data for c have a subnetwork to fuse
        classes = sorted(set(self.own.classes) | set(predicted.get(me, {})))
        members_of = {c: sorted(m for m in view if c in held[m] or c in predicted.get(m, {})) for c in classes}
        first = view[me].classes
        if classes and not predicted and all(a.classes == first for a in view.values()):
            # every member holds every class, in one order: one stack, a slice per class (equal)
            stacked = np.stack([cast(np.ndarray, view[m].prototypes) for m in members_of[classes[0]]])
            point_sets = [np.ascontiguousarray(stacked[:, first.index(c)]) for c in classes]
        else:
            point_sets = [np.stack([held[m][c] if c in held[m] else predicted[m][c] for m in members_of[c]])
                          for c in classes]
        if o.proto_outliers == "trim":
            for j, c in enumerate(classes):
                keep = inliers(point_sets[j], members_of[c].index(me), o.proto_outlier_factor)
                self.counters["outliers_trimmed"] += int(np.count_nonzero(~keep))
                members_of[c] = [m for m, k in zip(members_of[c], keep) if k]
                point_sets[j] = point_sets[j][keep]
        return _FusionView(view, held, classes, members_of, point_sets)

    @cached_property
    def _training_classes(self) -> frozenset[int]:
        """Every class of the device's training data, those hidden for now (dynamic data) too."""
        return frozenset(int(c) for c in np.unique(self.ctx.device.y_train))

    @cached_property
    def _sweep_params(self) -> dict[str, Any]:
        """The K sweep's parameters (``choose_k_by_dbi``), from the options fixed for a run."""
        o = self.options
        return dict(k_max=o.max_k, n_init=o.kmeans_n_init, min_cluster_size=o.min_cluster_size, k_rule=o.k_rule)

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        """Alg. 2 on the device, over its view (itself and every peer in its cache): each class's
        K sweep sent to ``ctx.offload`` (computed with other devices' or ahead), then the fusion
        job once they are back. Not ready before this device has artifacts of its own, or while
        no peer's prototypes are in view."""
        seen = self._fusion_view(now)
        if seen is None:
            return NOT_READY
        answer = self.clusterings.cluster_many_later(seen.point_sets, self.ctx.offload, **self._sweep_params)
        return Deferred(answer, lambda clusterings: self._fusion_from(seen, clusterings))

    def _fusion_from(self, seen: _FusionView, clusterings: list[Clustering]) -> FusionJob | None:
        """Alg. 2 on the device: each class's cluster, the requests to cluster-mates, and the
        weighted sums of the mates' rows (``row_fusion``)."""
        me, o = self.ctx.device_id, self.options
        view, held, classes, members_of = seen.view, seen.held, seen.classes, seen.members_of
        model = self.model
        targets = {n: p.detach() for n, p in model.named_parameters()}
        clusters: list[ClassCluster] = []
        member_values: list[dict[str, torch.Tensor]] = []
        position: dict[int, int] = {}   # device id -> index into member_values
        requests: dict[int, list[int]] = {}
        self.last_predicted = 0
        for c, clustering in zip(classes, clusterings, strict=True):
            members = members_of[c]
            self.last_k[c] = clustering.k
            self.last_clusters[c] = {m: int(lab) for m, lab in zip(members, clustering.labels)}
            my_label = clustering.labels[members.index(me)]
            cluster = [m for m, lab in zip(members, clustering.labels) if lab == my_label]
            self._count_clustering(clustering.k, clustering.literal_k, len(cluster))
            for m in cluster:
                if m != me and c in held[m]:
                    requests.setdefault(m, []).append(c)
            # A peer known only by its prototypes shapes the clusters but has no parameters to give.
            mates = [m for m in cluster
                     if c in held[m] and view[m].values is not None
                     and c in cast("dict[int, UnitMasks]", view[m].units)]
            if c in held[me]:
                self.counters["class_fusions"] += 1
                self.counters["mate_fusions"] += any(m != me for m in mates)
            if not mates:
                continue
            self.last_predicted += c not in held[me]
            units = self._fusable(np.stack([view[m].unit_row[c] for m in mates]))
            scores = [view[m].score_of[c] for m in mates]
            if o.robust != "none":
                update, rows = self._robust_rows(targets, [cast("dict[str, torch.Tensor]", view[m].values)
                                                           for m in mates],
                                                 mates.index(me) if me in mates else None, units, scores)
                clusters.append(ClassCluster(members=[len(member_values)], units=rows[None], scores=[1.0]))
                member_values.append(update)
                continue
            for m in mates:
                if m not in position:
                    position[m] = len(member_values)
                    values = view[m].values
                    assert values is not None   # a mate holds its subnetworks
                    member_values.append(values)
            clusters.append(ClassCluster(members=[position[m] for m in mates], units=units, scores=scores))
        self.requests = requests
        job = row_fusion_job(targets, member_values, clusters, o.fusion, self.layers)
        if job is not None:   # the K sweeps were this fusion's work too
            job.prep_flops += sum(c.flops for c in clusterings)
        return job

    def _robust_rows(self, targets: dict[str, torch.Tensor], mates: list[dict[str, torch.Tensor]],
                     own_position: int | None, units: np.ndarray, scores: list[float]
                     ) -> tuple[dict[str, torch.Tensor], np.ndarray]:
        """One class's update combined by ``options.robust`` (``robust_rows``), counted."""
        o, count = self.options, RobustCount()
        update = robust_class_rows(targets, mates, own_position, units, scores, o.fusion,
                                   self.layers, o.robust, count,
                                   trim_fraction=o.trim_fraction, byzantine=o.byzantine, select=o.krum_select,
                                   clip_norm=o.clip_norm)
        self.counters["robust_groups"] += count.groups
        self.counters["robust_candidates"] += count.candidates
        self.counters["robust_set_aside"] += count.set_aside
        return update

    def _count_clustering(self, k: int, literal_k: int, cluster_size: int) -> None:
        n = self.counters
        n["clusterings"] += 1
        n["k_sum"] += k
        n["literal_k_sum"] += literal_k
        n["cluster_size_sum"] += cluster_size


def _key_order(key: Any) -> tuple[Any, ...]:
    return key if isinstance(key, tuple) else (key, "")


def _parse_requests(raw: Any, num_classes: int) -> dict[int, list[int]]:
    """Two-phase requests in a prototype part: ``{"<peer id>": [class, ...]}``."""
    if not isinstance(raw, dict):
        raise ArtifactError("meta 'requests' must map peer ids to class lists")
    out: dict[int, list[int]] = {}
    for peer, classes in raw.items():
        if not peer.isdigit() or not isinstance(classes, list) or not all(
                isinstance(c, int) and not isinstance(c, bool) and 0 <= c < num_classes for c in classes):
            raise ArtifactError(f"meta 'requests.{peer}' must be class ids in 0..{num_classes - 1} "
                                f"under a peer id")
        out[int(peer)] = classes
    return out
