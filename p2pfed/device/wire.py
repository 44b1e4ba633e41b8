"""A device's payload on the wire: one codec message, optionally marked as carried for another,
at the run's wire precision (``engine.precision``, ``p2pfed.transport.precision``).

A message carried by a relay (store-carry-forward) names the relay as ``sender`` and the device
that made it in ``meta['relay']`` (``origin``, ``hops``); the receiver caches it under the origin
with the origin's round and ``sent_at``, so its age is the age of the artifact, not of the hop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from torch import nn

from p2pfed.algorithms import Payload
from p2pfed.algorithms.payloads import RELAY_KEY as RELAY_KEY   # re-exported: the wire names it
from p2pfed.algorithms.model_payload import model_payload
from p2pfed.transport import Message, encode
from p2pfed.transport.codec import encoded_size
from p2pfed.transport.precision import reduce_precision
from p2pfed.transport.signing import SIGNATURE_KEY, Signed, Signer, signed_digest

RESEND_KIND = "peer/resend"   # a restarted real peer asks its neighbours to send a round again
HAVE_KIND = "contact/have"    # a real peer's summary vector, sent when a contact opens
ACK_KIND = "contact/ack"      # a real peer took a transfer in whole (its sender may send the next)
CONTROL_KINDS = frozenset({HAVE_KIND, ACK_KIND})
SIGNED_DIGEST_MEMO = "p2pfed/wire/signed-digest"   # memo key (with the owner) of a frame's known digest


def encode_share(kind: str, sender: int, round: int, sent_at: float, payload: Payload,
                 max_bytes: int, relay: dict[str, int] | None = None, precision: str = "float32",
                 signer: Signer | None = None) -> bytes:
    """A payload on the wire (``encode_share_signed``, without its digest)."""
    return encode_share_signed(kind, sender, round, sent_at, payload, max_bytes, relay, precision, signer)[0]


def encode_share_signed(kind: str, sender: int, round: int, sent_at: float, payload: Payload,
                        max_bytes: int, relay: dict[str, int] | None = None, precision: str = "float32",
                        signer: Signer | None = None) -> tuple[bytes, Signature | None]:
    """A payload on the wire, and what its signature covers (None: unsigned); ``relay`` marks a
    copy carried on behalf of its ``origin``;
    ``precision``: the wire precision of its float tensors (the receiver's intake restores them);
    ``signer``: the sender's key, which signs the payload as its owner's (``transport.signing``:
    the owner is the origin a payload marked as carried names, so only the origin's key makes a
    signature its receivers accept)."""
    meta, tensors = reduce_precision(payload.meta, payload.tensors, precision)
    own_relay = meta.get(RELAY_KEY)
    signature = None
    if signer is not None:
        owner = own_relay.get("origin", sender) if isinstance(own_relay, dict) else sender
        body = {k: v for k, v in meta.items() if k != RELAY_KEY}
        signature = Signature(owner, signed_digest(kind, owner, round, sent_at, body, tensors))
        meta = {**body, SIGNATURE_KEY: signer.sign_digest(signature.digest)}
        if own_relay is not None:
            meta[RELAY_KEY] = own_relay
    if relay is not None:
        meta = {**meta, RELAY_KEY: relay}
    return encode(Message(kind=kind, sender=sender, round=round, sent_at=sent_at, meta=meta,
                          tensors=tensors), max_bytes=max_bytes), signature


@dataclass(frozen=True)
class Signature:
    """What a share's signature covers: its owner and ``transport.signing.signed_digest``."""

    owner: int
    digest: bytes

    def memo(self) -> dict[Any, Any]:
        """A frame's memo (``exchange.Frame``) for exactly the bytes this share was encoded to:
        its receivers check the signature against this digest instead of hashing every tensor
        again (the digest is a function of those bytes; the runtime keeps a frame's memo only
        while its bytes come out of the sockets unchanged)."""
        return {(SIGNED_DIGEST_MEMO, self.owner): self.digest}


def encode_signed_copy(kind: str, carrier: int, round: int, sent_at: float, signed: Signed,
                       relay: dict[str, int], max_bytes: int) -> bytes:
    """A carried copy of a signed artifact, exactly as its owner signed it (``relay``: its origin
    and the links it will have travelled)."""
    meta = {**signed.meta, SIGNATURE_KEY: signed.signature, RELAY_KEY: relay}
    return encode(Message(kind=kind, sender=carrier, round=round, sent_at=sent_at, meta=meta,
                          tensors=signed.tensors), max_bytes=max_bytes)


def encode_resend_request(sender: int, from_round: int, sent_at: float, max_bytes: int) -> bytes:
    """A restarted peer's request: "send me again what you shared from ``from_round`` on".

    Frames that reached a peer between its last checkpoint and its death died with it; its
    neighbours had no way to know. Only real peers send and answer this (no payload)."""
    return encode(Message(kind=RESEND_KIND, sender=sender, round=from_round, sent_at=sent_at, meta={},
                          tensors={}), max_bytes=max_bytes)


def encode_control(kind: str, sender: int, sent_at: float, meta: dict[str, Any], max_bytes: int) -> bytes:
    """A contact-protocol message of real peers (``CONTROL_KINDS``; no tensors): the runtime
    answers it, the algorithm never sees it (``device.contact_protocol`` builds them, for real peers
    and for the simulator with ``contacts.protocol: acknowledged``)."""
    return encode(Message(kind=kind, sender=sender, round=0, sent_at=sent_at, meta=meta, tensors={}),
                  max_bytes=max_bytes)


def full_model_bytes(model: nn.Module, precision: str = "float32") -> int:
    """Encoded size of one whole-model message at the run's wire precision: the yardstick for
    communication ratios (so a ratio compares equal precisions)."""
    p = model_payload(model, 0)   # sized from zeros: a model driven to NaN still has a size
    meta, tensors = reduce_precision(p.meta, {k: np.zeros_like(v) for k, v in p.tensors.items()}, precision)
    return encoded_size(Message(kind="gossip/model", sender=0, round=0, sent_at=0.0, meta=meta,
                                tensors=tensors))
