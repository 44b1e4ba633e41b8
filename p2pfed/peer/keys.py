"""CURVE keys for real peers: making key pairs, and the socket settings that use them.

Why CURVE: peers on a LAN must not accept artifacts from anyone who can reach their port. The
receiving (bound) socket is a CURVE server whose ZAP handler accepts only the public keys of the
peers in its allowlist and stamps every message with that peer's id as ZMQ ``User-Id``, so the
runtime can check that the id a message claims is the key that sent it.

A peer's signing key (``transport.signing``: it signs the artifacts the peer makes) is derived
from its CURVE secret key, so only the holder of the CURVE pair has it; its public half is written
into the public ``.key`` file (``signing-key`` in the certificate's metadata), so the file that
gives a neighbour's CURVE key gives its signing key too.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from pathlib import Path

import zmq
import zmq.auth
from zmq.utils import z85
from zmq.auth.thread import ThreadAuthenticator

from p2pfed.transport import SocketConfigurer
from p2pfed.transport.signing import Signer, public_key_from_text

ZAP_DOMAIN = "p2pfed"
_SIGNING_CONTEXT = b"p2pfed/signing-key-from-curve/v1"
_SIGNING_LINE = re.compile(r'^\s*signing-key\s*=\s*"([^"]*)"\s*$', re.MULTILINE)


CURVE_KEY_CHARS = 40   # a 32-byte CURVE key in Z85 text
Z85_ALPHABET = frozenset(z85.Z85CHARS)


class KeyFileError(ValueError):
    """A key file that is missing, unreadable or holds a malformed key (names the file)."""


def _checked(path: Path, key: bytes | None, which: str) -> bytes:
    """``key`` if it is a well-formed Z85 CURVE key; ZeroMQ would otherwise refuse it later, with
    only 'Invalid argument' and after work has been done."""
    if key is None:
        raise KeyFileError(f"{path}: holds no CURVE {which} key")
    if len(key) != CURVE_KEY_CHARS:
        raise KeyFileError(f"{path}: the CURVE {which} key must be {CURVE_KEY_CHARS} Z85 characters, "
                           f"got {len(key)}")
    if not set(key) <= Z85_ALPHABET:
        raise KeyFileError(f"{path}: the CURVE {which} key holds characters outside Z85")
    return key


def make_keys(out_dir: Path, names: list[str]) -> list[tuple[Path, Path]]:
    """``NAME.key`` (public, to share) and ``NAME.key_secret`` (private, mode 600) per name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    made = []
    for name in names:
        public, secret = zmq.auth.create_certificates(out_dir, name)
        os.chmod(secret, 0o600)
        signing = base64.b64encode(signer_for_curve(load_pair(Path(secret))[1]).public_bytes()).decode("ascii")
        text = Path(public).read_text(encoding="utf-8")
        Path(public).write_text(text.replace("metadata\n", f'metadata\n    signing-key = "{signing}"\n', 1),
                                encoding="utf-8")
        made.append((Path(public), Path(secret)))
    return made


def signer_for_curve(secret: bytes) -> Signer:
    """The signing key of the peer whose z85 CURVE secret key is ``secret``."""
    return Signer.from_seed_bytes(hashlib.sha256(_SIGNING_CONTEXT + secret).digest())


def load_signing_key(path: Path) -> bytes:
    """The public signing key a ``.key`` file holds (``KeyFileError`` naming the file if none)."""
    try:
        found = _SIGNING_LINE.search(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"{path}: cannot read its signing key ({exc})") from None
    if found is None:
        raise KeyFileError(f"{path}: holds no signing key (keys made before artifacts were signed: make them "
                           "again with `p2pfed keys`, or set security.sign_artifacts: false)")
    try:
        return public_key_from_text(found.group(1))
    except ValueError as exc:
        raise KeyFileError(f"{path}: {exc}") from None


def load_public(path: Path) -> bytes:
    """The z85 public key in a ``.key`` or ``.key_secret`` file."""
    try:
        public, _ = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"{path}: cannot read CURVE public key ({exc})") from None
    return _checked(path, public, "public")


def load_pair(path: Path) -> tuple[bytes, bytes]:
    """(public, secret) z85 keys from a ``.key_secret`` file."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"{path}: cannot read CURVE key pair ({exc})") from None
    if secret is None:
        raise KeyFileError(f"{path}: holds no secret key (pass the .key_secret file)")
    return _checked(path, public, "public"), _checked(path, secret, "secret")


class AllowlistAuthenticator(ThreadAuthenticator):
    """ZAP handler: accept only allowlisted public keys; the User-Id is the key's peer id."""

    def __init__(self, context: zmq.Context, allowed: dict[bytes, int]) -> None:
        super().__init__(context)
        self.allowed = dict(allowed)   # z85 public key -> peer id

        class _Provider:
            def callback(_self, domain: str, key: bytes) -> bool:
                return key in self.allowed

        self.configure_curve_callback(ZAP_DOMAIN, _Provider())

    def curve_user_id(self, client_public_key: bytes) -> str:
        return str(self.allowed[z85.encode(client_public_key)])


def server_configurer(public: bytes, secret: bytes) -> SocketConfigurer:
    """For the bound mailbox: a CURVE server in the ZAP domain the authenticator serves."""
    def configure(sock: zmq.Socket, endpoint: str) -> None:
        sock.curve_publickey, sock.curve_secretkey = public, secret
        sock.curve_server = True
        sock.zap_domain = ZAP_DOMAIN.encode()
    return configure


def client_configurer(public: bytes, secret: bytes, server_keys: dict[str, bytes]) -> SocketConfigurer:
    """For outgoing sockets: our key pair plus the public key of the peer at ``endpoint``."""
    def configure(sock: zmq.Socket, endpoint: str) -> None:
        try:
            sock.curve_serverkey = server_keys[endpoint]
        except KeyError:
            raise ValueError(f"no public key known for peer endpoint {endpoint!r}") from None
        sock.curve_publickey, sock.curve_secretkey = public, secret
    return configure
