"""Helpers for the real-peer tests: tiny scenarios, peer files, keys and valid messages."""

from __future__ import annotations

import time
from pathlib import Path

import yaml
import zmq

from p2pfed.peer.keys import load_pair, load_public, make_keys, signer_for_curve
from p2pfed.peer.launcher import free_ports
from p2pfed.scenario.build import build_algorithm
from p2pfed.scenario.loader import load_scenario
from p2pfed.device import encode_share
from p2pfed.transport import Message, decode, encode
from p2pfed.testing import whole_share, train_once

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
TINY = ["dataset.synthetic.num_devices=3", "dataset.synthetic.samples_per_class=12",
        "model.hidden=[8,16]", "rounds=3"]


def write_peer_files(tmp: Path, n: int = 3, *, secure: bool = True, overrides: list[str] = (),
                     **extra) -> list[Path]:
    """Peer files for a complete graph of ``n`` tiny peers on free loopback ports."""
    ports = free_ports(n)
    if secure:
        make_keys(tmp / "keys", [f"peer-{i}" for i in range(n)])
    paths = []
    for i in range(n):
        cfg = {"id": i, "scenario": str(SCENARIO), "overrides": TINY + list(overrides), "listen": f"tcp://127.0.0.1:{ports[i]}",
               "neighbours": [{"id": j, "endpoint": f"tcp://127.0.0.1:{ports[j]}",
                               **({"public_key": f"keys/peer-{j}.key"} if secure else {})}
                              for j in range(n) if j != i],
               "out": f"peer-{i}", **extra}
        if secure:
            cfg["secret_key"] = f"keys/peer-{i}.key_secret"
        path = tmp / f"peer-{i}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        paths.append(path)
    return paths


def valid_message(sender: int, round: int = 0, keys: Path | None = None) -> tuple[Message, bytes]:
    """What device ``sender`` of the tiny scenario really sends in round 0, signed with its key
    pair in the folder ``keys`` (None: unsigned)."""
    loaded = load_scenario(SCENARIO, TINY)
    algo = build_algorithm(loaded, loaded.federation, sender)
    train_once(algo, 0)
    p = whole_share(algo, 0)
    signer = None if keys is None else signer_for_curve(load_pair(keys / f"peer-{sender}.key_secret")[1])
    msg = decode(encode_share(algo.message_kind, sender, round, time.time(), p, 2**24, signer=signer))
    return msg, encode(msg)


def client(ctx: zmq.Context, endpoint: str, server_key_file: Path | None,
           own_secret_file: Path | None) -> zmq.Socket:
    """A PUSH socket towards a peer, as a CURVE client with the given key pair (None: plaintext)."""
    sock = ctx.socket(zmq.PUSH)
    sock.linger = 0
    if server_key_file is not None:
        sock.curve_serverkey = load_public(server_key_file)
        sock.curve_publickey, sock.curve_secretkey = load_pair(own_secret_file)
    sock.connect(endpoint)
    return sock

