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

The parts: ``artifacts.py`` (what a device shares, on the wire and in memory), ``view.py`` (what
a fusion sees and clusters), ``row_fusion.py`` (the fusion rules), ``stats.py`` (the run's counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, cast

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from p2pfed.algorithms.base import (NOT_READY, Algorithm, ArtifactError, Deferred, DeviceContext, FusionWork,
                                    Payload, Received, UnitOptions, require_units)
from p2pfed.algorithms.fedsub.artifacts import (PARTS, Artifacts, decode_subnetworks, encode_subnetworks,
                                                 parse_artifacts, reliability_scores)
from p2pfed.algorithms.fedsub.memory import FedSubMemory
from p2pfed.algorithms.registry import register
from p2pfed.algorithms.state import array_from_state, array_state
from p2pfed.algorithms.fedsub.clustering import Clustering, ClusteringCache
from p2pfed.learning.batched_fusion import FusionJob
from p2pfed.algorithms.fedsub.robust_rows import RobustCount, robust_class_rows
from p2pfed.algorithms.fedsub.row_fusion import ClassCluster, row_fusion_job
from p2pfed.algorithms.robust import RobustOptions
from p2pfed.learning.model import feature_dim
from p2pfed.learning.units import unit_layers
from p2pfed.algorithms.fedsub.privacy import perturb
from p2pfed.algorithms.fedsub.stats import STAT_COUNTERS, FedSubCounts
from p2pfed.algorithms.fedsub.view import FusionView, fusable, fusion_view, newest_artifacts
from p2pfed.learning.prototypes import class_means, class_prototypes
from p2pfed.algorithms.fedsub.subnetworks import EXTRACTORS, UnitMasks, extract_unit_masks

# the artifacts' wire form lives in artifacts.py; its names stay importable from here
__all__ = ["PARTS", "STAT_COUNTERS", "Artifacts", "ClassPrototypes", "FedSub", "FedSubOptions",
           "decode_subnetworks", "encode_subnetworks"]


class FedSubOptions(UnitOptions, RobustOptions):
    extraction: str = Field("naive", description=(
        "Subnetwork rule, one of `naive`, `lrp-a1b0`, `lrp-a2b1`: `naive` keeps the units with positive mean "
        "activation on the class (Eq. 2; a channel's activation is its mean over positions); `lrp-*` keep the units "
        "with positive mean layer-wise relevance (Eq. 3-5, the alpha-beta rule with alpha = 1, beta = 0 or alpha = 2,"
        " beta = 1)."))
    fusion: Literal["overlap", "cluster-avg", "leadership"] = Field("overlap", description=(
        "Class fusion rule: `overlap`, Overlapping Components (Eq. 9-10); `cluster-avg`, the cluster average (Eq. "
        "6-7), each parameter over the members whose subnetwork holds it; `leadership`, cluster leadership (Eq. 8), "
        "the subnetwork of the highest `score`."))
    score: Literal["equal", "size", "accuracy", "size-accuracy"] = Field("equal", description=(
        "Reliability score per class: 1 (`equal`), the class's sample count (`size`), the training accuracy on the "
        "class (`accuracy`), or their product (`size-accuracy`); normalised by the cluster maximum. With `equal` "
        "every score ties, so leadership takes the lowest id."))
    depth: Literal["full", "partial"] = Field("full", description=(
        "`full`: every layer is fused; `partial`: only the first `shared_layers` layers, the rest stay local."))
    shared_layers: int = Field(2, ge=1, description=(
        "Layers fused when `depth` is `partial` (a CNN's conv blocks count as layers)."))
    prototypes: Literal["input", "embedding"] = Field("input", description=(
        "What a class prototype is: `input`, the class mean of the device's input data (the papers), computed once "
        "per local dataset and again only when the data change; `embedding`, the mean penultimate-layer feature of "
        "the current model, recomputed every round."))
    k_rule: Literal["min-size", "half", "literal"] = Field("min-size", description=(
        "Which K of the Davies-Bouldin sweep (K-means for K = 2..n-1) may win: `min-size`, the lowest index among "
        "partitions whose clusters all have at least `min_cluster_size` members (one cluster when there is none); "
        "`half`, K <= n/2 (one cluster when n <= 3); `literal`, the lowest index over every K, as the journal's text "
        "states, which on real prototypes tends to pick singleton clusters."))
    max_k: int | None = Field(None, ge=2, description="Upper bound of the K sweep; null: n - 1.")
    kmeans_n_init: int = Field(4, ge=1, description="K-means restarts per K.")
    min_cluster_size: int = Field(2, ge=1, description=(
        "Smallest cluster the `min-size` rule accepts (the other rules ignore it). A small value suits sparse graphs "
        "and contacts; on dense graphs a larger one, about a fifth of the prototypes a device clusters, fits better."))
    exchange: Literal["broadcast", "two-phase"] = Field("broadcast", description=(
        "`broadcast`: prototypes and every class subnetwork to every neighbour; `two-phase`: prototypes and requests "
        "first, then each peer that asked gets only the subnetworks of the classes it requested (fewer bytes; "
        "parameters lag one round more at the start)."))
    cache_max_age_s: float | None = Field(None, gt=0, description=(
        "Drop cached peer artifacts older than this many simulated seconds; null: keep them."))
    predict_missing: bool = Field(False, description=(
        "Missing-prototype prediction (ubiquitous paper, Alg. 3): before clustering, every member of the device's "
        "view gets a predicted prototype for each class it lacks, the similarity-weighted mean of the prototypes of "
        "its `predict_neighbors` most similar members; the device then also fuses, for a class it has no data for, "
        "its cluster-mates' subnetworks."))
    predict_neighbors: int = Field(3, ge=1, description=(
        "n, the most similar members that vote in a prediction (Eq. 2)."))
    predict_for: Literal["all", "own"] = Field("all", description=(
        "The classes a device predicts its own prototype for: `all`, every class a peer holds (Alg. 3 as written); "
        "`own`, only its own training classes hidden for now (dynamic data). Peers' predicted prototypes are the same"
        " under both."))
    proto_outliers: Literal["none", "trim"] = Field("none", description=(
        "`trim`: leave out of each class's clustering the peers whose prototype is farther from its nearest other "
        "prototype than `proto_outlier_factor` times the median such distance (the device's own always stays); "
        "`none`: cluster every prototype."))
    proto_outlier_factor: float = Field(3.0, gt=0, description=(
        "`trim`'s threshold, in multiples of the median nearest-neighbour distance."))
    proto_noise: Literal["none", "gaussian", "laplace"] = Field("none", description=(
        "Noise added to the prototypes a device sends (journal Sec. 3.3), drawn once per prototype computation; its "
        "own clustering uses its clean prototypes. `none`: no noise."))
    proto_noise_sigma: float | None = Field(None, gt=0, description=(
        "`gaussian`: the per-coordinate standard deviation (required with it, refused otherwise)."))
    proto_noise_epsilon: float | None = Field(None, gt=0, description=(
        "`laplace`: the privacy budget epsilon; the per-coordinate scale is `proto_noise_sensitivity` / epsilon "
        "(required with it, refused otherwise)."))
    proto_noise_sensitivity: float = Field(1.0, gt=0, description=(
        "`laplace`: the L1 sensitivity of a prototype. Features are not clipped, so epsilon is a differential-privacy"
        " guarantee only if this bound holds for your data."))

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
class ClassPrototypes:
    """A device's prototypes as last computed: clean (its own clustering) and as shared (noisy)."""

    classes: np.ndarray
    prototypes: np.ndarray
    counts: np.ndarray
    shared: np.ndarray
    visible: list[int] | None    # the visible classes they were computed for (input space)


@register
class FedSub(FedSubMemory, Algorithm[FedSubOptions]):
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
        self.counts = FedSubCounts(self.layers)

    @cached_property
    def prototype_dim(self) -> int:
        return (int(self.ctx.x_train.shape[1]) if self.options.prototypes == "input"
                else feature_dim(self.model, self.ctx.model_name))

    # -- client side (Alg. 1) --------------------------------------------------------------
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
        self.counts.extracted(units)
        values = {n: p.detach().clone() for n, p in model.named_parameters()}
        self.own = Artifacts(classes=[int(c) for c in protos.classes], prototypes=protos.prototypes,
                             scores=reliability_scores(self.options.score, self.ctx, protos.classes, protos.counts),
                             values=values, units=units)
        return protos

    def _subnetwork_tensors(self, classes: list[int]) -> dict[str, np.ndarray]:
        """The encoded subnetworks of ``classes``, counted in both byte accountings."""
        own = self.own
        assert own is not None and own.units is not None   # set by the share's extraction
        units = {c: own.units[c] for c in classes}
        tensors = encode_subnetworks(dict(self.model.named_parameters()), self.layers, units)
        self.counts.subnetwork_message(tensors, units)
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
        o = self.options
        return {**({"chosen_k_by_class": dict(self.last_k)} if self.last_k else {}),
                **self.counts.report(predicted=self.last_predicted if o.predict_missing else None,
                                     proto_outliers=o.proto_outliers, robust=o.robust)}

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
        protos_state = None if protos is None else {
            "classes": array_state(protos.classes), "prototypes": array_state(protos.prototypes),
            "counts": array_state(protos.counts), "shared": array_state(protos.shared),
            "visible": protos.visible}
        return {**super().state_dict(), "own": None if own is None else own.state_dict(), "last_k": dict(self.last_k),
                "last_clusters": {c: dict(labels) for c, labels in self.last_clusters.items()},
                "last_predicted": self.last_predicted, "protos": protos_state,
                "requests": {p: list(c) for p, c in self.requests.items()}, **self.counts.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.own = None if state["own"] is None else Artifacts.from_state(state["own"])
        self.last_k = {int(c): int(k) for c, k in state["last_k"].items()}
        self.last_clusters = {int(c): {int(m): int(lab) for m, lab in labels.items()}
                              for c, labels in state.get("last_clusters", {}).items()}
        self.last_predicted = int(state["last_predicted"])
        p = state["protos"]
        self.protos = None if p is None else ClassPrototypes(
            array_from_state(p["classes"]), array_from_state(p["prototypes"]), array_from_state(p["counts"]),
            array_from_state(p["shared"]), None if p["visible"] is None else list(p["visible"]))
        self.requests = {int(k): list(v) for k, v in state["requests"].items()}
        self.counts.load_state_dict(state)

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
        # the layers as plain tuples: looked up once per delivery, and compared between devices'
        # keys in C, without the dataclass's Python-level __eq__
        return ("fedsub/parse", self.ctx.num_classes, self.options.prototypes, self.prototype_dim,
                tuple((layer.size, layer.params, layer.row_shapes) for layer in self.layers))

    def _parse_checked(self, payload: Payload) -> Artifacts:
        return parse_artifacts(payload, self.ctx.num_classes, self.prototype_dim, self.layers)

    def check(self, payload: Payload) -> Artifacts:
        return self._parse(payload)

    @property
    def peers(self) -> dict[int, Artifacts]:
        """Per peer in the cache: its newest prototypes with its newest subnetworks, from
        whichever parts hold them (a peer known only by its subnetworks is not in the view: it
        cannot be clustered)."""
        cache = cast("dict[int | tuple[int, str], Received]", self.cache)   # keyed by peer, or (peer, part)
        senders = sorted({k[0] if isinstance(k, tuple) else k for k in cache})
        merged = {s: newest_artifacts(self.cache, s) for s in senders}
        return {s: art for s, art in merged.items() if art is not None}

    # -- the server's part, on the device (Alg. 2) -----------------------------------------
    def _fusion_view(self, now: float) -> FusionView | None:
        """After the TTL: the devices in view (this one and its peers), their prototypes held or
        predicted (Alg. 3), and each class's clustering problem; None: no peer to fuse with."""
        self.drop_stale(now, self.options.cache_max_age_s)
        peers = self.peers
        if self.own is None or not peers:
            return None
        return fusion_view(self.ctx.device_id, self.own, peers, self.options, self._training_classes,
                           self.counts)

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

    def _fusion_from(self, seen: FusionView, clusterings: list[Clustering]) -> FusionJob | None:
        """Alg. 2 on the device: each class's cluster, the requests to cluster-mates, and the
        weighted sums of the mates' rows (``row_fusion``)."""
        me, o = self.ctx.device_id, self.options
        view, held, classes, members_of = seen.view, seen.held, seen.classes, seen.members_of
        model = self.model
        targets = {n: p.detach() for n, p in model.named_parameters()}
        clusters: list[ClassCluster] = []
        member_values: list[Mapping[str, torch.Tensor]] = []
        position: dict[int, int] = {}   # device id -> index into member_values
        requests: dict[int, list[int]] = {}
        self.last_predicted = 0
        for c, clustering in zip(classes, clusterings, strict=True):
            members = members_of[c]
            self.last_k[c] = clustering.k
            self.last_clusters[c] = {m: int(lab) for m, lab in zip(members, clustering.labels)}
            my_label = clustering.labels[members.index(me)]
            cluster = [m for m, lab in zip(members, clustering.labels) if lab == my_label]
            self.counts.clustering(clustering.k, clustering.literal_k, len(cluster))
            for m in cluster:
                if m != me and c in held[m]:
                    requests.setdefault(m, []).append(c)
            # A peer known only by its prototypes shapes the clusters but has no parameters to give.
            mates = [m for m in cluster
                     if c in held[m] and view[m].values is not None
                     and c in cast("dict[int, UnitMasks]", view[m].units)]
            if c in held[me]:
                self.counts.n["class_fusions"] += 1
                self.counts.n["mate_fusions"] += any(m != me for m in mates)
            if not mates:
                continue
            self.last_predicted += c not in held[me]
            units = fusable(np.stack([view[m].unit_row[c] for m in mates]), self.layers, o.depth, o.shared_layers)
            scores = [view[m].score_of[c] for m in mates]
            if o.robust != "none":
                update, rows = self._robust_rows(targets, [cast("Mapping[str, torch.Tensor]", view[m].values)
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

    def _robust_rows(self, targets: dict[str, torch.Tensor], mates: list[Mapping[str, torch.Tensor]],
                     own_position: int | None, units: np.ndarray, scores: list[float]
                     ) -> tuple[dict[str, torch.Tensor], np.ndarray]:
        """One class's update combined by ``options.robust`` (``robust_rows``), counted."""
        o, count = self.options, RobustCount()
        update = robust_class_rows(targets, mates, own_position, units, scores, o.fusion,
                                   self.layers, o.robust, count,
                                   trim_fraction=o.trim_fraction, byzantine=o.byzantine, select=o.krum_select,
                                   clip_norm=o.clip_norm)
        self.counts.robust(count)
        return update


def _key_order(key: Any) -> tuple[Any, ...]:
    return key if isinstance(key, tuple) else (key, "")
