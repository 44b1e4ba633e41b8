"""Atomic per-round checkpoints of one peer, so a killed peer resumes where it stopped.

A checkpoint is written to a temporary file and moved over the old one with ``os.replace``, so a
kill at any moment leaves either the previous round's checkpoint or this one, never half a file.
It holds only tensors, numbers and strings and is read back with ``torch.load(weights_only=True)``
(no arbitrary objects). Payloads from peers are stored as their JSON meta plus tensors, exactly
what the codec accepted, and go through the algorithm's ``receive`` again on restore.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from p2pfed.algorithms.base import Algorithm, Payload, Received

FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint that does not belong to this peer or scenario (names the file)."""


def save(path: Path, algo: Algorithm, *, next_round: int, fingerprint: str,
         runtime: dict[str, Any]) -> None:
    """Write ``path`` atomically: model, RNG states, cached payloads and the runtime's counters."""
    ctx = algo.ctx
    cache = [{"sender": int(r.sender), "round": int(r.round), "sent_at": float(r.sent_at),
              "received_at": float(r.received_at), "fresh": bool(r.fresh),
              "meta": json.dumps(r.payload.meta),
              "tensors": {k: torch.from_numpy(np.array(v)) for k, v in r.payload.tensors.items()}}
             for r in algo.cache.values()]
    state = {
        "format": FORMAT, "peer": ctx.device_id, "fingerprint": fingerprint, "next_round": next_round,
        "model": {k: v.detach().clone() for k, v in ctx.model.state_dict().items()},
        "torch_rng": ctx.torch_generator.get_state(),
        "numpy_rng": json.dumps(ctx.rng.bit_generator.state),
        "cache": cache,
        "runtime": json.dumps(runtime),
    }
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def restore(path: Path, algo: Algorithm, *, fingerprint: str) -> tuple[int, dict[str, Any]]:
    """Load ``path`` into ``algo``; returns (the round to run next, the runtime's saved state)."""
    try:
        state = torch.load(path, weights_only=True)
    except Exception as exc:  # torch raises several types for damaged files
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(exc).__name__}: {exc})") from None
    ctx = algo.ctx
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a p2pfed peer checkpoint (format {FORMAT})")
    if state["peer"] != ctx.device_id or state["fingerprint"] != fingerprint:
        raise CheckpointError(f"{path}: written by peer {state['peer']} for another scenario or "
                              f"config; move it away to start peer {ctx.device_id} afresh")
    ctx.model.load_state_dict(state["model"])
    ctx.torch_generator.set_state(state["torch_rng"])
    ctx.rng.bit_generator.state = json.loads(state["numpy_rng"])
    algo.cache.clear()
    for item in sorted(state["cache"], key=lambda c: c["sender"]):
        payload = Payload(meta=json.loads(item["meta"]),
                          tensors={k: v.numpy() for k, v in item["tensors"].items()})
        received = Received(sender=item["sender"], round=item["round"], sent_at=item["sent_at"],
                            received_at=item["received_at"], payload=payload)
        algo.receive(received)
        received.fresh = item["fresh"]   # the cache holds this object (keyed by sender, or sender and part)
    return int(state["next_round"]), json.loads(state["runtime"])
