"""A device's payload on the wire: one codec message, optionally marked as carried for another.

A message carried by a relay (store-carry-forward) names the relay as ``sender`` and the device
that made it in ``meta['relay']`` (``origin``, ``hops``); the receiver caches it under the origin
with the origin's round and ``sent_at``, so its age is the age of the artifact, not of the hop.
"""

from __future__ import annotations

from torch import nn

from p2pfed.algorithms import Payload
from p2pfed.algorithms.model_payload import model_payload
from p2pfed.transport import Message, encode
from p2pfed.transport.codec import encoded_size

RELAY_KEY = "relay"
RESEND_KIND = "peer/resend"   # a restarted real peer asks its neighbours to send a round again


def encode_share(kind: str, sender: int, round: int, sent_at: float, payload: Payload,
                 max_bytes: int, relay: dict[str, int] | None = None) -> bytes:
    """A payload on the wire; ``relay`` marks a copy carried on behalf of its ``origin``."""
    meta = payload.meta if relay is None else {**payload.meta, RELAY_KEY: relay}
    return encode(Message(kind=kind, sender=sender, round=round, sent_at=sent_at, meta=meta,
                          tensors=payload.tensors), max_bytes=max_bytes)


def encode_resend_request(sender: int, from_round: int, sent_at: float, max_bytes: int) -> bytes:
    """A restarted peer's request: "send me again what you shared from ``from_round`` on".

    Frames that reached a peer between its last checkpoint and its death died with it; its
    neighbours had no way to know. Only real peers send and answer this (no payload)."""
    return encode(Message(kind=RESEND_KIND, sender=sender, round=from_round, sent_at=sent_at, meta={},
                          tensors={}), max_bytes=max_bytes)


def full_model_bytes(model: nn.Module) -> int:
    """Encoded size of one whole-model message: the yardstick for communication ratios."""
    p = model_payload(model, 0)
    return encoded_size(Message(kind="gossip/model", sender=0, round=0, sent_at=0.0, meta=p.meta,
                                tensors=p.tensors))
