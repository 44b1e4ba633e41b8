"""A pruned sub-model on the wire: only the kept units' parameters, plus one bit per hidden unit.

SAFL sends the small pruned model, not the full one (Sec. III-D: a pruned model of rate r costs
(1 - r) M). For an MLP that is, per layer, the rows of the kept output units restricted to the
columns of the kept input units, their biases and gates, and the keep masks packed 8 units per
byte so the receiver can put every value back in place (``decode_submodel``).
"""

from __future__ import annotations

import numpy as np
import torch

from p2pfed.algorithms.base import ArtifactError, Payload, expect_array
from p2pfed.algorithms.safl.heterogeneous import SubModel
from p2pfed.learning.model import MLP
from p2pfed.algorithms.safl.slimming import KeepMasks


def _finite(a: np.ndarray) -> bool:
    return bool(np.isfinite(a).all())


def encode_submodel(model: MLP, masks: KeepMasks, **meta: object) -> Payload:
    """The kept part of ``model`` (float32) and its packed keep masks, with ``meta``."""
    rows = [np.asarray(m, dtype=bool) for m in masks] + [np.ones(model.layers[-1].out_features, dtype=bool)]
    cols = [np.ones(model.layers[0].in_features, dtype=bool)] + rows[:-1]
    tensors: dict[str, np.ndarray] = {"units": np.packbits(np.concatenate(rows[:-1]))}
    for i, layer in enumerate(model.layers):
        w = layer.weight.detach().numpy()
        tensors[f"layers.{i}.weight"] = w[np.ix_(rows[i], cols[i])].astype(np.float32)
        tensors[f"layers.{i}.bias"] = layer.bias.detach().numpy()[rows[i]].astype(np.float32)
    assert model.gates is not None   # SAFL's MLP has unit gates
    for i, g in enumerate(model.gates):
        tensors[f"gates.{i}"] = g.detach().numpy()[rows[i]].astype(np.float32)
    return Payload(meta=dict(meta), tensors=tensors)


def decode_submodel(model: MLP, payload: Payload) -> SubModel:
    """The sender's sub-model in dense form (zeros where pruned), checked against ``model``. The
    dense form goes into ``payload.memo``: the receivers of a broadcast in the simulators share it
    (read-only), each checking the arrays' shapes against its own model first."""
    sizes = [layer.out_features for layer in model.layers[:-1]]
    packed = expect_array(payload, "units", (-(-sum(sizes) // 8),), kinds="u")
    if packed.dtype != np.uint8:
        raise ArtifactError(f"tensor 'units' has dtype {packed.dtype}, expected uint8 (packed bits)")
    key = ("safl/submodel", tuple(tuple(layer.weight.shape) for layer in model.layers))
    kept = payload.remember(key, lambda: _KeptUnits(packed, model))
    for i in range(len(model.layers)):
        expect_array(payload, f"layers.{i}.weight", kept.weight_shapes[i])
        expect_array(payload, f"layers.{i}.bias", kept.weight_shapes[i][:1])
    for i, m in enumerate(kept.masks):
        expect_array(payload, f"gates.{i}", (int(m.sum()),))
    return kept.dense(model, payload)   # raises (and keeps no dense form) if a value is not finite


class _KeptUnits:
    """A sub-model message's keep masks and, built on first use, its dense form."""

    def __init__(self, packed: np.ndarray, model: MLP) -> None:
        sizes = [layer.out_features for layer in model.layers[:-1]]
        bits = np.unpackbits(packed, count=sum(sizes)).astype(bool)
        self.masks = [np.array(part, dtype=bool) for part in np.split(bits, np.cumsum(sizes)[:-1])]
        if not all(m.any() for m in self.masks):
            raise ArtifactError("tensor 'units' prunes every unit of a hidden layer")
        self.rows = self.masks + [np.ones(model.layers[-1].out_features, dtype=bool)]
        self.cols = [np.ones(model.layers[0].in_features, dtype=bool)] + self.masks
        self.weight_shapes = [(int(r.sum()), int(c.sum())) for r, c in zip(self.rows, self.cols)]
        self._dense: SubModel | None = None

    def dense(self, model: MLP, payload: Payload) -> SubModel:
        if self._dense is not None:
            return self._dense
        values: dict[str, torch.Tensor] = {}
        for i, layer in enumerate(model.layers):
            w = expect_array(payload, f"layers.{i}.weight", self.weight_shapes[i], check=_finite)
            b = expect_array(payload, f"layers.{i}.bias", self.weight_shapes[i][:1], check=_finite)
            dense_w = np.zeros(tuple(layer.weight.shape), dtype=np.float32)
            dense_w[np.ix_(self.rows[i], self.cols[i])] = w
            dense_b = np.zeros(layer.out_features, dtype=np.float32)
            dense_b[self.rows[i]] = b
            values[f"layers.{i}.weight"], values[f"layers.{i}.bias"] = (torch.from_numpy(dense_w),
                                                                        torch.from_numpy(dense_b))
        for i, m in enumerate(self.masks):
            g = expect_array(payload, f"gates.{i}", (int(m.sum()),), check=_finite)
            dense_g = np.zeros(m.size, dtype=np.float32)
            dense_g[m] = g
            values[f"gates.{i}"] = torch.from_numpy(dense_g)
        self._dense = SubModel(self.masks, values)
        return self._dense
