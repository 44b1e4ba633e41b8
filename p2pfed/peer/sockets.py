"""A real peer's ZeroMQ sockets: one context, the CURVE authenticator of a secure run, the
mailbox it listens on and the outbox it sends through.

Kept apart from the peer's loop so that opening and closing them (keys, allowlist, lingering)
is one job: a secure peer loads every key file and admits only its neighbours' public keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import zmq

from p2pfed.peer.config import LoadedPeerConfig
from p2pfed.peer.keys import AllowlistAuthenticator, client_configurer, load_pair, load_public, server_configurer
from p2pfed.transport import Mailbox, Outbox, Rejected

SNDHWM = 50          # messages queued per neighbour before new ones are dropped


class PeerSockets:
    """Open at construction (a failure closes what was opened), closed by ``close``."""

    def __init__(self, loaded_config: LoadedPeerConfig, endpoints: dict[int, str], *, secure: bool,
                 max_bytes: int, on_reject: Callable[[Rejected], None]) -> None:
        cfg = loaded_config.config
        self.context = zmq.Context()
        self.auth: AllowlistAuthenticator | None = None
        server = client = None
        if secure:   # then load_peer_config required every key file
            public, secret = load_pair(loaded_config.resolve(cast(str, cfg.secret_key)))
            keys = {n.id: load_public(loaded_config.resolve(cast(str, n.public_key))) for n in cfg.neighbours}
            self.auth = AllowlistAuthenticator(self.context, {k: i for i, k in keys.items()})
            self.auth.start()
            server = server_configurer(public, secret)
            by_endpoint = {endpoints[i]: k for i, k in keys.items()}
            client = client_configurer(public, secret, by_endpoint)
        try:
            self.mailbox = Mailbox(self.context, cfg.listen, max_bytes=max_bytes, configure=server,
                                   on_reject=on_reject)
        except BaseException:
            self.close()
            raise
        self.outbox = Outbox(self.context, sndhwm=SNDHWM, linger_ms=0, send_timeout_ms=0, configure=client)

    def close(self) -> None:
        """Close sockets without lingering (idempotent)."""
        for part in ("outbox", "mailbox"):
            if hasattr(self, part):
                getattr(self, part).close()
        if self.auth is not None:
            self.auth.stop()
            self.auth = None
        if not self.context.closed:
            self.context.destroy(linger=0)   # any socket still open (a Ctrl-C mid-send) is closed, not waited on
