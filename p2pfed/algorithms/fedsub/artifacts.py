"""FedSub's artifacts: one device's class prototypes, reliability scores and class subnetworks,
as held in memory and as sent (the rows of the union of the class subnetworks once, plus one bit
per unit and class), and the receiver's checks that turn a message back into them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

import numpy as np
import torch

from p2pfed.algorithms.base import ArtifactError, DeviceContext, Payload, expect_array
from p2pfed.algorithms.fedsub.subnetworks import UnitMasks, union_units
from p2pfed.algorithms.state import array_from_state, array_state
from p2pfed.learning.batched_fusion import SomeRows, Source
from p2pfed.learning.training import per_class_accuracy
from p2pfed.learning.units import UnitLayer


PARTS = ("whole", "prototypes", "subnetworks")


@dataclass
class Artifacts:
    """One device's class-level artifacts, per parameter. Never modified once built: what a
    fusion reads from them per class is worked out once and kept."""

    classes: list[int]
    prototypes: np.ndarray | None       # (C, d); None when only the subnetwork part arrived
    scores: list[float]
    # parameters, zero outside the union of subnetworks: a peer's as the rows it sent (``SomeRows``)
    values: Mapping[str, torch.Tensor] | None
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

    def state_dict(self) -> dict[str, Any]:
        """A device's own artifacts (all parts, no requests) for its checkpoint."""
        return {"classes": list(self.classes), "prototypes": array_state(self.prototypes),
                "scores": list(self.scores),
                "values": {k: v.clone() for k, v in cast("dict[str, torch.Tensor]", self.values).items()},
                "units": {c: [array_state(u) for u in masks]
                          for c, masks in cast("dict[int, UnitMasks]", self.units).items()}}

    @classmethod
    def from_state(cls, own: dict[str, Any]) -> Artifacts:
        return cls(classes=list(own["classes"]), prototypes=array_from_state(own["prototypes"]),
                   scores=list(own["scores"]), values={k: v.clone() for k, v in own["values"].items()},
                   units={int(c): [array_from_state(u) for u in masks] for c, masks in own["units"].items()})

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


def reliability_scores(kind: str, ctx: DeviceContext, classes: np.ndarray, counts: np.ndarray) -> list[float]:
    """One reliability score per class a device shares (ubiquitous Alg. 1 l.5): equal, its
    sample count, the model's training accuracy on it, or their product."""
    if kind == "equal":
        return [1.0] * len(classes)
    acc = per_class_accuracy(ctx.model, ctx.x_train, ctx.y_train, ctx.num_classes)[classes]
    if kind == "size":
        return [float(c) for c in counts]
    if kind == "accuracy":
        return [float(a) for a in acc]
    return [float(c * a) for c, a in zip(counts, acc)]


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
                       ) -> tuple[dict[int, UnitMasks], SomeRows]:
    """Inverse of ``encode_subnetworks``, checked against the local model's shapes. What it
    builds from the arrays (unit masks, the rows sent) goes into ``payload.memo``: the receivers
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
    return decoded.units, decoded.values(layers, sent)


class _DecodedUnits:
    """A subnetwork message's unit masks, and (built on first use) its parameters as the rows
    sent. Shared by the message's receivers: never modified."""

    def __init__(self, packed: np.ndarray, classes: list[int], sizes: tuple[int, ...]) -> None:
        bits = np.unpackbits(packed, axis=1, count=sum(sizes)).astype(bool)
        bits.flags.writeable = False   # the class masks are views into it
        spans = list(zip(np.cumsum([0, *sizes[:-1]]), np.cumsum(sizes)))
        self.units = {c: [bits[j, a:b] for a, b in spans] for j, c in enumerate(classes)}
        any_class = cast(np.ndarray, bits.any(axis=0))
        self.rows = [any_class[a:b] for a, b in spans]
        self.row_counts = [int(r.sum()) for r in self.rows]
        self._values: SomeRows | None = None

    def values(self, layers: list[UnitLayer], sent: list[dict[str, np.ndarray]]) -> SomeRows:
        """The parameters as the rows sent and which rows they are (zero elsewhere), over the
        message's own arrays: no copy of them is kept."""
        if self._values is None:
            compact: dict[str, Source] = {}
            rows: dict[str, np.ndarray | None] = {}
            shapes: dict[str, tuple[int, ...]] = {}
            for i, (layer, arrays) in enumerate(zip(layers, sent)):
                whole = bool(self.rows[i].all())
                for name, shape in zip(layer.params, layer.row_shapes):
                    compact[name] = arrays[name].astype(np.float32, copy=False)
                    rows[name] = None if whole else self.rows[i]
                    shapes[name] = (layer.size, *shape)
            self._values = SomeRows(compact, rows, shapes)
        return self._values


def parse_artifacts(payload: Payload, num_classes: int, prototype_dim: int, layers: list[UnitLayer]) -> Artifacts:
    """A message's artifacts (a whole share, or its prototype or subnetwork part), checked
    against the receiver's class count, prototype size and model layers."""
    classes, scores = payload.meta.get("classes"), payload.meta.get("scores")
    nc = num_classes
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
        protos = np.array(expect_array(payload, "prototypes", (len(classes), prototype_dim)), dtype=np.float32)
        protos.setflags(write=False)   # shared by the message's receivers
        requests = _parse_requests(payload.meta.get("requests", {}), nc)
    if part != "prototypes":
        units, values = decode_subnetworks(layers, classes, payload)
    return Artifacts(classes=classes, prototypes=protos, scores=[float(s) for s in scores],
                     values=values, units=units, requests=requests)


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
