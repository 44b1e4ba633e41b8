"""Turning a method's state into what a checkpoint may hold, and back.

Checkpoints are read with ``torch.load(weights_only=True)``: only tensors, numbers, strings,
booleans, None, lists, tuples and dicts come back, never arbitrary objects. These helpers convert
the numpy arrays and cached payloads a method keeps into that vocabulary and back, exactly
(dtypes and values preserved), so a restored device continues bit for bit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import MutableMapping
from typing import Any, overload

import numpy as np
import torch

from p2pfed.algorithms.payloads import Payload, Received
from p2pfed.transport.signing import Signed


def array_state(a: np.ndarray | None) -> torch.Tensor | None:
    """A numpy array as a tensor a checkpoint may hold (a copy, same dtype)."""
    return None if a is None else torch.from_numpy(np.array(a, copy=True))


@overload
def array_from_state(t: torch.Tensor) -> np.ndarray: ...


@overload
def array_from_state(t: None) -> None: ...


def array_from_state(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.numpy().copy()


def model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of a model's parameters and buffers."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def received_state(item: Received) -> dict[str, Any]:
    """A cached payload as checkpoint data: its routing fields, JSON meta and tensors."""
    return {"sender": int(item.sender), "round": int(item.round), "sent_at": float(item.sent_at),
            "received_at": float(item.received_at), "fresh": bool(item.fresh), "hops": int(item.hops),
            "meta": json.dumps(item.payload.meta, allow_nan=False),
            "tensors": {k: array_state(v) for k, v in item.payload.tensors.items()},
            "signed": None if item.signed is None else signed_state(item.signed, item.payload.tensors),
            "spent": bool(item.spent)}


def signed_state(signed: Signed, tensors: dict[str, np.ndarray]) -> dict[str, Any]:
    """A signed artifact as checkpoint data; a wire tensor that is the payload's own (sent at
    full precision) is not stored twice."""
    return {"signature": signed.signature, "meta": json.dumps(signed.meta, allow_nan=False),
            "tensors": {k: None if tensors.get(k) is v else array_state(v) for k, v in signed.tensors.items()}}


def signed_from_state(state: dict[str, Any] | None, tensors: dict[str, np.ndarray]) -> Signed | None:
    if state is None:
        return None
    return Signed(state["signature"], json.loads(state["meta"]),
                  {k: tensors[k] if v is None else array_from_state(v) for k, v in state["tensors"].items()})


def received_from_state(state: dict[str, Any], interned: MutableMapping[tuple[Any, ...], Payload] | None = None
                        ) -> Received:
    """A cached payload back from checkpoint data. With ``interned`` (a memo the devices of one
    process share), equal payloads — one broadcast as its receivers cached it — become one
    ``Payload`` again, as the simulators delivered it: what is computed once per message
    (``payload.memo``) or per shared member (``batched_fusion``'s products) is computed as it
    was before the checkpoint, so a resumed run stays bit-identical."""
    tensors = {k: array_from_state(v) for k, v in state["tensors"].items()}
    key = None
    if interned is not None:
        digest = hashlib.blake2b(digest_size=16)
        for name in sorted(tensors):
            array = np.ascontiguousarray(tensors[name])
            digest.update(f"{name}:{array.dtype.str}:{array.shape}".encode())
            digest.update(array.tobytes())
        key = (state["sender"], state["round"], state["sent_at"], state["meta"], digest.hexdigest())
    payload = interned.get(key) if interned is not None and key is not None else None
    if payload is None:
        payload = Payload(meta=json.loads(state["meta"]), tensors=tensors)
        if interned is not None and key is not None:
            interned[key] = payload
    return Received(sender=state["sender"], round=state["round"], sent_at=state["sent_at"],
                    received_at=state["received_at"], payload=payload, fresh=state["fresh"],
                    hops=state["hops"], signed=signed_from_state(state.get("signed"), payload.tensors),
                    spent=bool(state.get("spent", False)))
