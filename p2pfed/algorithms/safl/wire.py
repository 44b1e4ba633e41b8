"""A pruned sub-model on the wire: only the kept units' parameters, plus one bit per hidden unit.

SAFL sends the small pruned model, not the full one (Sec. III-D: a pruned model of rate r costs
(1 - r) M). Per layer (``learning/units.py``) that is the rows of its kept units, restricted, in
the weights that read the layer before, to that layer's kept units: an MLP's weight rows and
columns, biases and gates; a CNN's kept filters (over the kept input channels), their biases and
batch-norm scales and shifts, and the head's columns of the kept last channels. The keep masks
travel packed 8 units per byte so the receiver can put every value back in place
(``decode_submodel``). Batch norm's running statistics are buffers and never travel.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from p2pfed.algorithms.base import ArtifactError, Payload, expect_array
from p2pfed.algorithms.safl.heterogeneous import SubModel
from p2pfed.algorithms.safl.slimming import KeepMasks, reads_inputs, unit_rows
from p2pfed.learning.model import MLP
from p2pfed.learning.units import unit_layers


def _finite(a: np.ndarray) -> bool:
    return bool(np.isfinite(a).all())


def _tensor_layout(model: nn.Module) -> list[tuple[str, int, tuple[int, ...]]]:
    """(name, layer, row shape) of every parameter the sub-model carries, in wire order: each
    layer's unit parameters, then the MLP's gates (per hidden layer, one value a unit)."""
    out = [(name, i, shape) for i, layer in enumerate(unit_layers(model))
           for name, shape in zip(layer.params, layer.row_shapes)]
    if isinstance(model, MLP) and model.gates is not None:
        out += [(f"gates.{i}", i, ()) for i in range(len(model.gates))]
    return out


def _kept(a: np.ndarray, rows: np.ndarray, cols: np.ndarray | None) -> np.ndarray:
    """The kept rows of ``a`` and, where it reads the layer before, its kept columns."""
    a = a[rows]
    return a[:, cols] if reads_inputs(a.shape[1:], cols) else a


def encode_submodel(model: nn.Module, masks: KeepMasks, **meta: object) -> Payload:
    """The kept part of ``model`` (float32) and its packed keep masks, with ``meta``."""
    rows = unit_rows(model, masks)
    tensors: dict[str, np.ndarray] = {"units": np.packbits(np.concatenate([r for r, _ in rows[:-1]]))}
    params = dict(model.named_parameters())
    for name, i, _ in _tensor_layout(model):
        tensors[name] = _kept(params[name].detach().numpy(), *rows[i]).astype(np.float32)
    return Payload(meta=dict(meta), tensors=tensors)


def decode_submodel(model: nn.Module, payload: Payload) -> SubModel:
    """The sender's sub-model in dense form (zeros where pruned), checked against ``model``. The
    dense form goes into ``payload.memo``: the receivers of a broadcast in the simulators share it
    (read-only), each checking the arrays' shapes against its own model first."""
    sizes = [layer.size for layer in unit_layers(model)[:-1]]
    packed = expect_array(payload, "units", (-(-sum(sizes) // 8),), kinds="u")
    if packed.dtype != np.uint8:
        raise ArtifactError(f"tensor 'units' has dtype {packed.dtype}, expected uint8 (packed bits)")
    layout = _tensor_layout(model)
    key = ("safl/submodel", tuple((name, i, shape) for name, i, shape in layout))
    kept = payload.remember(key, lambda: _KeptUnits(packed, model))
    for name, shape in kept.shapes.items():
        expect_array(payload, name, shape)
    return kept.dense(model, payload)   # raises (and keeps no dense form) if a value is not finite


class _KeptUnits:
    """A sub-model message's keep masks and, built on first use, its dense form."""

    def __init__(self, packed: np.ndarray, model: nn.Module) -> None:
        sizes = [layer.size for layer in unit_layers(model)[:-1]]
        bits = np.unpackbits(packed, count=sum(sizes)).astype(bool)
        self.masks = [np.array(part, dtype=bool) for part in np.split(bits, np.cumsum(sizes)[:-1])]
        if not all(m.any() for m in self.masks):
            raise ArtifactError("tensor 'units' prunes every unit of a hidden layer")
        self.rows = unit_rows(model, self.masks)
        self.layout = _tensor_layout(model)
        self.shapes: dict[str, tuple[int, ...]] = {}
        for name, i, shape in self.layout:
            rows, cols = self.rows[i]
            inner = (int(cols.sum()), *shape[1:]) if cols is not None and reads_inputs(shape, cols) else shape
            self.shapes[name] = (int(rows.sum()), *inner)
        self._dense: SubModel | None = None

    def dense(self, model: nn.Module, payload: Payload) -> SubModel:
        if self._dense is not None:
            return self._dense
        values: dict[str, torch.Tensor] = {}
        for name, i, shape in self.layout:
            kept = expect_array(payload, name, self.shapes[name], check=_finite)
            rows, cols = self.rows[i]
            dense = np.zeros((rows.size, *shape), dtype=np.float32)
            if cols is not None and reads_inputs(shape, cols):
                view = dense.reshape(rows.size, cols.size, -1)
                view[np.ix_(rows, cols, np.ones(view.shape[2], dtype=bool))] = kept.reshape(*kept.shape[:2], -1)
            else:
                dense[rows] = kept
            values[name] = torch.from_numpy(dense)
        self._dense = SubModel(self.masks, values)
        return self._dense
