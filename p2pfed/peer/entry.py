"""``p2pfed peer``: one peer process, run with the runtime its scenario needs (rounds, or
contacts) until the end."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

from p2pfed.peer.build import load_peer_spec
from p2pfed.peer.config import load_peer_config
from p2pfed.peer.contacts import ContactPeer
from p2pfed.peer.runtime import Peer, insecure_warning


class PeerInterrupted(Exception):
    """Ctrl-C stopped a peer; the message says where and what its checkpoint holds."""


def run_peer(config_path: str | Path, *, insecure: bool = False) -> dict[str, Any]:
    """``p2pfed peer``: run one peer to the end and return its summary; Ctrl-C raises
    PeerInterrupted (one line: the round, and the checkpoint a restart resumes from)."""
    loaded = load_peer_config(config_path, insecure=insecure)
    if insecure:
        insecure_warning(f"peer {loaded.config.id}")
    spec = load_peer_spec(loaded)
    peer_class = Peer if spec.scenario.contacts.kind == "none" else ContactPeer
    peer = peer_class(loaded, insecure=insecure, spec=spec)
    print(start_line(peer), file=sys.stderr, flush=True)
    # SIGTERM ends the run like Ctrl-C: sockets closed at once; the checkpoint is already on disk.
    # SIGINT stops it even where the process that started it ignored SIGINT (a shell's background
    # job, a worker pool): Python leaves an inherited ignore in place.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return peer.run()
    except KeyboardInterrupt:
        raise PeerInterrupted(interrupted_line(peer)) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        peer.close()


def start_line(peer: Peer) -> str:
    """Who this peer is, where it listens, whom it talks to and in which run: the first line of
    its log, so a host's log says which peer it is."""
    cfg = peer.config
    neighbours = ", ".join(f"{n.id} at {n.endpoint}" for n in cfg.neighbours) or "none"
    resumes = "; resumes from its checkpoint" if peer.checkpoint_path.exists() else ""
    return (f"p2pfed peer {cfg.id} (run {cfg.run_id or 'of no plan'}): listening on {cfg.listen}, "
            f"neighbours {neighbours}; {'CURVE' if peer.secure else 'PLAINTEXT'}{resumes}")


def interrupted_line(peer: Peer) -> str:
    """Where Ctrl-C stopped ``peer`` and what a restart resumes from (checkpoints are written
    whole or not at all, so the last one is intact)."""
    path = peer.checkpoint_path
    if not path.exists():
        return (f"peer {peer.config.id} interrupted (Ctrl-C) before its first checkpoint; "
                "start it again to begin afresh")
    return (f"peer {peer.config.id} interrupted (Ctrl-C); its checkpoint {path} is intact: start it again "
            "to resume from it")
