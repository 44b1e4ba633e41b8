"""Artifacts signed by their owners: an Ed25519 signature over what a device made, checked by
every device that receives it, directly or as a copy carried by others.

Why: a carried copy names its origin in its metadata, and nothing but a signature binds that
claim to the device that made it; without one, a liar can speak for as many devices as it
likes (a Sybil). The signature covers the artifact as it travels on the wire (its message kind,
its owner's id, round and ``sent_at``, its metadata at wire precision, and every tensor's name,
dtype, shape and bytes), not the relay record (origin and hops), which each carrier rewrites: so
a carrier forwards the owner's signature unchanged, and any change to the artifact, or a claim to
another origin, fails the check. The signature travels in the message's metadata under
``SIGNATURE_KEY`` and its bytes are counted with the rest of the message.

Keys come from ``cryptography`` (Ed25519, RFC 8032): in simulation each device's key is derived
from the run's seed and its id (``signer_from_seed``), so a run is reproducible; a real peer's
signing key travels with its CURVE key pair (``p2pfed.peer.keys``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

__all__ = ["SIGNATURE_KEY", "Keyring", "Signed", "Signer", "Signing", "public_key_from_text", "signed_digest",
           "signer_from_seed"]

SIGNATURE_KEY = "sig"   # meta key of the owner's signature (base64 text of 64 bytes)
_CONTEXT = b"p2pfed/artifact/v1"


def signed_digest(kind: str, owner: int, round: int, sent_at: float, meta: Mapping[str, Any],
                  tensors: Mapping[str, np.ndarray]) -> bytes:
    """The SHA-256 digest a signature covers: the artifact's routing fields, its metadata (keys
    sorted, so the order a carrier rebuilds them in does not matter) and its tensors' bytes."""
    head = json.dumps({"kind": kind, "owner": int(owner), "round": int(round), "sent_at": float(sent_at),
                       "meta": meta, "tensors": [[n, a.dtype.str, list(a.shape)] for n, a in sorted(tensors.items())]},
                      sort_keys=True, separators=(",", ":"), allow_nan=False)
    digest = hashlib.sha256(_CONTEXT)
    digest.update(head.encode("utf-8"))
    for _, array in sorted(tensors.items()):
        digest.update(np.ascontiguousarray(array).view(np.uint8).reshape(-1).data)
    return digest.digest()


class Signer:
    """One device's private signing key."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self.key = key

    @classmethod
    def from_seed_bytes(cls, seed: bytes) -> Signer:
        """The key whose 32-byte private seed is ``seed``."""
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    def public_bytes(self) -> bytes:
        return self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def sign(self, kind: str, owner: int, round: int, sent_at: float, meta: Mapping[str, Any],
             tensors: Mapping[str, np.ndarray]) -> str:
        """The signature of an artifact (``signed_digest``) as the text that travels in its meta."""
        return self.sign_digest(signed_digest(kind, owner, round, sent_at, meta, tensors))

    def sign_digest(self, digest: bytes) -> str:
        """The signature of an artifact whose ``signed_digest`` is ``digest``, as its meta's text."""
        return base64.b64encode(self.key.sign(digest)).decode("ascii")


def signer_from_seed(seed: int, device: int) -> Signer:
    """Device ``device``'s key in a simulated run seeded with ``seed`` (the same each run)."""
    material = _CONTEXT + int(seed).to_bytes(8, "little") + int(device).to_bytes(8, "little")
    return Signer.from_seed_bytes(hashlib.sha256(material).digest())


def public_key_from_text(text: str) -> bytes:
    """A 32-byte Ed25519 public key from its base64 text (``ValueError`` naming what is wrong)."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("signing key is not base64 text") from None
    if len(raw) != 32:
        raise ValueError(f"signing key must be 32 bytes, got {len(raw)}")
    return raw


@dataclass(frozen=True)
class Signed:
    """An artifact as its owner signed it: the signature and the metadata (without the relay
    record and the signature) and tensors as they travelled; a carrier forwards exactly these."""

    signature: str
    meta: dict[str, Any]
    tensors: dict[str, np.ndarray]


class Keyring:
    """The public signing keys a device knows, by device id."""

    def __init__(self, keys: Mapping[int, bytes]) -> None:
        self.keys = {int(i): Ed25519PublicKey.from_public_bytes(k) for i, k in keys.items()}

    def problem(self, signature: Any, kind: str, owner: int, round: int, sent_at: float,
                meta: Mapping[str, Any], tensors: Mapping[str, np.ndarray], digest: bytes | None = None) -> str | None:
        """Why the artifact's ``signature`` is not its ``owner``'s (None: it is). ``digest``: the
        artifact's ``signed_digest`` where the caller knows it for these exact contents (the
        runtime does for a frame whose bytes it saw encoded), saving the pass over its tensors."""
        key = self.keys.get(owner)
        if key is None:
            return f"no signing key is known for device {owner}"
        if not isinstance(signature, str):
            return f"carries no signature of device {owner}"
        try:
            raw = base64.b64decode(signature.encode("ascii"), validate=True)
            key.verify(raw, digest if digest is not None else signed_digest(kind, owner, round, sent_at, meta, tensors))
        except (binascii.Error, UnicodeEncodeError, InvalidSignature):
            return f"signature is not device {owner}'s"
        return None


@dataclass(frozen=True)
class Signing:
    """A simulated run's keys: each device's signer, and the keyring every receiver checks with."""

    signers: tuple[Signer, ...]
    keyring: Keyring

    @classmethod
    def simulated(cls, seed: int, num_devices: int) -> Signing:
        """Every device's key derived from the run's ``seed`` and its id (``signer_from_seed``)."""
        signers = tuple(signer_from_seed(seed, i) for i in range(num_devices))
        return cls(signers, Keyring({i: s.public_bytes() for i, s in enumerate(signers)}))
