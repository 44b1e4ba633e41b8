"""What one FedSub fusion sees (the server's part, Alg. 2, run on the device): each peer's newest
prototypes with its newest subnetworks, merged from its cached messages, and per class the
members clustered and their points — prototypes held, or predicted by collaborative filtering
(ubiquitous Alg. 3), with far outliers optionally left out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np

from p2pfed.algorithms.base import Received
from p2pfed.algorithms.fedsub.artifacts import Artifacts
from p2pfed.algorithms.fedsub.collaborative import predict_missing
from p2pfed.algorithms.fedsub.outliers import inliers
from p2pfed.algorithms.fedsub.stats import FedSubCounts
from p2pfed.learning.units import UnitLayer

class ViewOptions(Protocol):
    """The options of FedSub's that shape its view."""

    @property
    def predict_missing(self) -> bool: ...
    @property
    def predict_neighbors(self) -> int: ...
    @property
    def predict_for(self) -> str: ...
    @property
    def proto_outliers(self) -> str: ...
    @property
    def proto_outlier_factor(self) -> float: ...


@dataclass(frozen=True)
class FusionView:
    """What one fusion clusters: the devices in view, their held prototypes per class, and per
    class the members clustered and their points (held or predicted)."""

    view: dict[int, Artifacts]
    held: dict[int, dict[int, np.ndarray]]
    classes: list[int]
    members_of: dict[int, list[int]]
    point_sets: list[np.ndarray]


def newest_artifacts(cache: Mapping[Any, Received], sender: int) -> Artifacts | None:
    """``sender``'s newest prototypes with its newest subnetworks, from whichever of its cached
    messages (a whole share, or a part) holds them; None without prototypes. On equal (round,
    sent_at) the first found wins, in the order whole share, prototype part, subnetwork part."""
    protos: Artifacts | None = None
    values: Artifacts | None = None
    protos_at = values_at = None
    for key in (sender, (sender, "prototypes"), (sender, "subnetworks")):
        item = cache.get(key)
        if item is None:
            continue
        art: Artifacts = item.parsed
        at = (item.round, item.sent_at)
        if art.prototypes is not None and (protos_at is None or at > protos_at):
            protos, protos_at = art, at
        if art.values is not None and (values_at is None or at > values_at):
            values, values_at = art, at
    if protos is None:
        return None
    return protos.with_subnetworks(values)


def fusion_view(me: int, own: Artifacts, peers: dict[int, Artifacts], options: ViewOptions,
                training_classes: frozenset[int], counts: FedSubCounts) -> FusionView:
    """Device ``me``'s view (itself and ``peers``) and each class's clustering problem; outliers
    trimmed are counted in ``counts``. ``training_classes``: every class of its training data."""
    o = options
    view = {me: own, **peers}
    held = {m: a.prototype_of for m, a in view.items()}
    predicted = predict_missing(held, o.predict_neighbors) if o.predict_missing else {}
    if o.predict_for == "own" and me in predicted:   # not classes this device will never have
        predicted[me] = {c: p for c, p in predicted[me].items() if c in training_classes}
    # members with a real or a predicted prototype for c are clustered; only those with real
    # data for c have a subnetwork to fuse
    classes = sorted(set(own.classes) | set(predicted.get(me, {})))
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
            counts.n["outliers_trimmed"] += int(np.count_nonzero(~keep))
            members_of[c] = [m for m, k in zip(members_of[c], keep) if k]
            point_sets[j] = point_sets[j][keep]
    return FusionView(view, held, classes, members_of, point_sets)


def fusable(rows: np.ndarray, layers: list[UnitLayer], depth: str, shared_layers: int) -> np.ndarray:
    """Unit masks (members × rows) with the layers past ``shared_layers`` cleared (partial depth)."""
    if depth == "full":
        return rows
    shared = sum(layer.size for layer in layers[:shared_layers])
    kept = rows.copy()
    kept[:, shared:] = False
    return kept
