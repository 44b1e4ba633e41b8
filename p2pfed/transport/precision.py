"""Wire precision: every method's float tensors sent as float32, float16 or int8.

Why here and not in a method: a bytes comparison between methods is fair only at equal precision,
so precision is one transport setting (``engine.precision``) that applies to every message of a
run alike. The sender reduces the float tensors of a payload and records, under the reserved meta
key ``precision``, what the receiver needs to restore them; the receiver restores them to their
original dtype before the method sees them, so no method is aware of the setting.

- ``float16``: each float32/float64 tensor cast to float16 (a tensor with a value float16 cannot
  hold, beyond +-65504, travels at its own precision).
- ``int8``: per-tensor affine quantisation, ``q = round((x - low) / scale) - 128`` with
  ``scale = (high - low) / 255``, so each value is off by at most ``scale / 2``; ``scale`` and
  ``low`` travel in the record (2 JSON numbers per tensor).

Integer and boolean tensors (unit masks, counts) are never changed. The record is checked like
everything else a peer sends: a record that names a missing tensor, the wrong dtype, or a
non-finite or negative scale is refused with a ``CodecError`` naming the tensor.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from p2pfed.transport.codec import CodecError

__all__ = ["PRECISIONS", "PRECISION_KEY", "Precision", "reduce_precision", "restore_precision"]

Precision = Literal["float32", "float16", "int8"]
PRECISIONS: tuple[str, ...] = ("float32", "float16", "int8")
PRECISION_KEY = "precision"
_FLOAT16_MAX = float(np.finfo(np.float16).max)
_RESTORABLE = ("float32", "float64")


def reduce_precision(meta: dict[str, Any], tensors: dict[str, np.ndarray], precision: str
                     ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(meta, tensors)`` as sent at ``precision``; float32 returns them unchanged."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if precision == "float32":
        return meta, tensors
    if PRECISION_KEY in meta:
        raise ValueError(f"meta key {PRECISION_KEY!r} is reserved for the wire precision")
    record: dict[str, list[Any]] = {}
    out = dict(tensors)
    for name, array in tensors.items():
        if array.dtype.name not in _RESTORABLE or array.size == 0:
            continue
        if precision == "float16":
            if float(np.abs(array).max()) <= _FLOAT16_MAX:
                out[name] = array.astype(np.float16)
                record[name] = [array.dtype.name]
        else:
            low, high = float(array.min()), float(array.max())
            scale = (high - low) / 255.0 or 1.0
            q = np.rint((array.astype(np.float64) - low) / scale) - 128.0
            out[name] = np.clip(q, -128, 127).astype(np.int8)
            record[name] = [array.dtype.name, scale, low]
    return ({**meta, PRECISION_KEY: record} if record else meta), out


def restore_precision(record: Any, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The tensors as the sender's method made them (to float rounding), from the received
    ``record`` (the popped meta entry; None: nothing was reduced). Raises ``CodecError``."""
    if record is None:
        return tensors
    if not isinstance(record, dict):
        raise CodecError("bad-precision", f"meta {PRECISION_KEY!r} must be a map of tensor names")
    out = dict(tensors)
    for name, entry in record.items():
        array = tensors.get(name)
        if array is None:
            raise CodecError("bad-precision", f"meta {PRECISION_KEY!r} names tensor {name!r:.80}, which is not sent")
        if not isinstance(entry, list) or not entry or entry[0] not in _RESTORABLE:
            raise CodecError("bad-precision", f"tensor {name!r:.80}: record must start with one of {_RESTORABLE}")
        dtype = np.dtype(entry[0])
        if len(entry) == 1 and array.dtype == np.float16:
            out[name] = array.astype(dtype)
        elif len(entry) == 3 and array.dtype == np.int8 and _finite_numbers(entry[1:]) and entry[1] > 0:
            scale, low = float(entry[1]), float(entry[2])
            out[name] = ((array.astype(np.float64) + 128.0) * scale + low).astype(dtype)
        else:
            raise CodecError("bad-precision", f"tensor {name!r:.80} ({array.dtype.name}) does not match its "
                                              f"record {entry!r:.80}")
    return out


def _finite_numbers(values: list[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)
