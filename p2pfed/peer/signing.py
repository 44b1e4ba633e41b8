"""A real peer's signing identity, bound to its CURVE key pair.

A peer's Ed25519 signing key is derived from its CURVE secret key (``peer.keys``), so whoever
holds the CURVE pair holds the signing key and nobody else does; its public half travels in the
peer's public ``.key`` file with its CURVE key. A peer signs what it shares and checks every
artifact, carried copies included, against the key its neighbour's ``.key`` file binds to the
artifact's owner: one whose signature does not verify, or whose owner has no key there, is refused
(``bad-signature``). Without CURVE (``--insecure``) nothing is signed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from p2pfed.peer.config import LoadedPeerConfig
from p2pfed.peer.keys import load_pair, load_signing_key, signer_for_curve
from p2pfed.transport.signing import Keyring, Signer


@dataclass(frozen=True)
class PeerSigning:
    """The peer's signer and the keys it checks artifacts with (both None: nothing is signed)."""

    signer: Signer | None = None
    keyring: Keyring | None = None


def peer_signing(loaded: LoadedPeerConfig, *, secure: bool, sign: bool) -> PeerSigning:
    """The peer's signer and the keys it checks artifacts with (none when insecure, or when the
    scenario does not sign); a neighbour's key file without a signing key is one line naming the
    field."""
    if not (secure and sign):
        return PeerSigning()
    cfg = loaded.config
    keys = {}
    for i, n in enumerate(cfg.neighbours):
        try:
            keys[n.id] = load_signing_key(loaded.resolve(cast(str, n.public_key)))
        except ValueError as exc:
            raise ValueError(f"{loaded.source}: neighbours.{i}.public_key: {exc}") from None
    signer = signer_for_curve(load_pair(loaded.resolve(cast(str, cfg.secret_key)))[1])
    return PeerSigning(signer, Keyring({cfg.id: signer.public_bytes(), **keys}))
