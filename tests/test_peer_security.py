"""A live peer on loopback: CURVE allowlist, sender identity, bad-message handling, fuzzing.

The peer runs in this process (its sockets are real tcp sockets with a ZAP handler); test
clients connect to it like neighbours would.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2pfed.cli.main import main
from p2pfed.peer.config import load_peer_config
from p2pfed.peer.keys import load_pair, load_public, make_keys
from p2pfed.peer.runtime import Peer
from p2pfed.scenario.errors import ScenarioError
from p2pfed.transport import Message, encode
from tests.peer_support import client, valid_message, write_peer_files


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def live_peer(tmp: Path, **extra) -> Peer:
    paths = write_peer_files(tmp, **extra)
    return Peer(load_peer_config(paths[0]))


def count(peer: Peer) -> tuple[int, int]:
    return peer.counters.messages_received, peer.counters.messages_dropped


def send_and_handle(peer: Peer, sock: zmq.Socket, data: bytes) -> None:
    sock.send(data)
    assert peer.poll(5.0), "the peer received nothing within 5 s"


# -- config and keys ---------------------------------------------------------------------------
def test_keys_command_makes_loadable_private_pairs(tmp_path, capsys):
    assert main(["keys", "--out", str(tmp_path), "--peers", "2"]) == 0
    for i in range(2):
        public = load_public(tmp_path / f"peer-{i}.key")
        assert load_pair(tmp_path / f"peer-{i}.key_secret")[0] == public and len(public) == 40
        assert stat.S_IMODE(os.stat(tmp_path / f"peer-{i}.key_secret").st_mode) == 0o600
    assert load_public(tmp_path / "peer-0.key") != load_public(tmp_path / "peer-1.key")


def test_bad_peer_config_names_file_and_field_and_exits_2(tmp_path, capsys):
    path = write_peer_files(tmp_path)[0]
    cfg = json.loads(json.dumps(__import__("yaml").safe_load(path.read_text())))
    cfg["listen"] = "udp://nowhere"
    cfg["round_timeout_s"] = -1
    cfg["colour"] = "blue"
    cfg["neighbours"][0]["id"] = 0
    path.write_text(json.dumps(cfg))
    assert main(["peer", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    for field in ("listen", "round_timeout_s", "colour: unknown key"):
        assert f"{path}: {field}" in err, err
    with pytest.raises(ScenarioError, match="lists itself"):
        cfg.update(listen="tcp://127.0.0.1:1", round_timeout_s=1)
        del cfg["colour"]
        path.write_text(json.dumps(cfg))
        load_peer_config(path)


def test_secure_by_default_needs_keys_insecure_does_not(tmp_path, capsys):
    path = write_peer_files(tmp_path, secure=False)[0]
    with pytest.raises(ScenarioError) as info:
        load_peer_config(path)
    assert any("secret_key: required" in p for p in info.value.problems)
    assert any("neighbours.0.public_key: required for peer 1" in p for p in info.value.problems)
    assert load_peer_config(path, insecure=True).config.id == 0


def test_launch_refuses_a_peer_count_the_scenario_does_not_have(capsys):
    from tests.peer_support import SCENARIO, TINY
    assert main(["launch", str(SCENARIO), "--peers", "5", *sum((["--set", s] for s in TINY), [])]) == 2
    assert "--peers 5: the scenario" in capsys.readouterr().err


# -- a live peer -------------------------------------------------------------------------------
def test_only_allowlisted_keys_get_through_and_identity_is_checked(tmp_path, ctx):
    peer = live_peer(tmp_path)
    try:
        ep = peer.config.listen
        _, good = valid_message(sender=1, keys=tmp_path / "keys")
        # A stranger's key is refused by the ZAP handler: nothing reaches the peer at all.
        make_keys(tmp_path / "stranger", ["x"])
        stranger = client(ctx, ep, tmp_path / "keys/peer-0.key", tmp_path / "stranger/x.key_secret")
        stranger.send(good)
        assert not peer.poll(1.0) and count(peer) == (0, 0)
        # Plaintext is refused too.
        plain = client(ctx, ep, None, None)
        plain.send(good)
        assert not peer.poll(0.5) and count(peer) == (0, 0)
        # Peer 1's key, claiming to be peer 1: accepted and cached.
        one = client(ctx, ep, tmp_path / "keys/peer-0.key", tmp_path / "keys/peer-1.key_secret")
        send_and_handle(peer, one, good)
        assert count(peer) == (1, 0) and 1 in peer.algo.cache
        # Peer 2's key, claiming to be peer 1: dropped as an identity failure, logged with the id.
        two = client(ctx, ep, tmp_path / "keys/peer-0.key", tmp_path / "keys/peer-2.key_secret")
        send_and_handle(peer, two, good)
        assert count(peer) == (1, 1) and peer.drop_reasons == {"identity": 1}
        assert peer.bad == {2: 1}
    finally:
        peer.close()


def test_frames_the_mailbox_refuses_are_counted_against_their_curve_sender(tmp_path, ctx):
    """A multipart frame never reaches the intake's decoder, yet it is a counted drop with a
    reason, charged to the authenticated peer that sent it."""
    peer = live_peer(tmp_path)
    try:
        _, good = valid_message(sender=1, keys=tmp_path / "keys")
        one = client(ctx, peer.config.listen, tmp_path / "keys/peer-0.key", tmp_path / "keys/peer-1.key_secret")
        one.send_multipart([b"a" * 10, b"b" * 20])
        send_and_handle(peer, one, good)
        assert count(peer) == (1, 1)
        assert peer.drop_reasons == {"transport:multipart": 1} and peer.bad == {1: 1}
    finally:
        peer.close()


def test_a_peer_sending_bad_messages_is_ignored_after_the_threshold(tmp_path, ctx, caplog):
    peer = live_peer(tmp_path, max_bad_messages=3)
    try:
        one = client(ctx, peer.config.listen, tmp_path / "keys/peer-0.key", tmp_path / "keys/peer-1.key_secret")
        for _ in range(5):
            send_and_handle(peer, one, b"P2PF garbage")
        _, good = valid_message(sender=1, keys=tmp_path / "keys")
        send_and_handle(peer, one, good)   # even a good one is ignored now
        assert peer.ignored == {1} and count(peer) == (0, 6)
        assert peer.drop_reasons["ignored"] == 2 and 1 not in peer.algo.cache
        assert "disconnects peer 1 after 4 bad messages" in caplog.text
        assert "from peer 1" in caplog.text
    finally:
        peer.close()


def _malformed(good: Message, blob: bytes):
    """Strategies for messages that must be rejected, each for a known reason."""
    protos = good.tensors["prototypes"]

    def with_(**kw) -> bytes:
        fields = dict(kind=good.kind, sender=good.sender, round=good.round, sent_at=good.sent_at,
                      meta=good.meta, tensors=good.tensors)
        fields.update(kw)
        return encode(Message(**fields), require_finite=False)

    garbage = st.binary(max_size=300).filter(lambda b: not b.startswith(b"P2PF"))
    truncated = st.integers(0, len(blob) - 1).map(lambda k: blob[:k])
    trailing = st.binary(min_size=1, max_size=64).map(lambda b: blob + b)
    non_finite = st.tuples(st.integers(0, protos.size - 1), st.sampled_from([np.nan, np.inf, -np.inf])).map(
        lambda t: with_(tensors={**good.tensors, "prototypes": _set_flat(protos, *t)}))
    other_sender = st.integers(0, 2**31).filter(lambda s: s != good.sender).map(lambda s: with_(sender=s))
    past_the_run = st.integers(3, 2**40).map(lambda k: with_(round=k))  # TINY has 3 rounds
    other_kind = st.from_regex(r"[a-z0-9/_-]{1,20}", fullmatch=True).filter(
        lambda k: k != good.kind).map(lambda k: with_(kind=k))
    bad_shape = st.lists(st.integers(0, 6), min_size=1, max_size=3).filter(
        lambda s: tuple(s) != protos.shape).map(
        lambda s: with_(tensors={**good.tensors, "prototypes": np.zeros(s, dtype=np.float32)}))
    bad_dtype = st.sampled_from(["int32", "int8", "bool", "uint8", "int64"]).map(
        lambda d: with_(tensors={**good.tensors, "prototypes": protos.astype(d)}))
    missing = st.sampled_from(sorted(good.tensors)).map(
        lambda name: with_(tensors={k: v for k, v in good.tensors.items() if k != name}))
    json_value = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
                              lambda c: st.lists(c, max_size=3), max_leaves=6)
    bad_meta = st.tuples(st.sampled_from(["classes", "scores"]), json_value).filter(
        lambda kv: kv[1] != good.meta[kv[0]]).map(lambda kv: with_(meta={**good.meta, kv[0]: kv[1]}))
    return st.one_of(garbage, truncated, trailing, non_finite, other_sender, past_the_run, other_kind, bad_shape,
                     bad_dtype, missing, bad_meta)


def _set_flat(a: np.ndarray, i: int, v: float) -> np.ndarray:
    out = np.array(a, copy=True)
    out.reshape(-1)[i] = v
    return out


def test_fuzz_1000_malformed_messages_no_crash_all_counted(tmp_path, ctx):
    peer = live_peer(tmp_path, max_bad_messages=10**6)
    good, blob = valid_message(sender=1, keys=tmp_path / "keys")
    sock = client(ctx, peer.config.listen, tmp_path / "keys/peer-0.key", tmp_path / "keys/peer-1.key_secret")
    sent = 0
    try:
        @settings(max_examples=1000, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(_malformed(good, blob))
        def feed(data: bytes) -> None:
            nonlocal sent
            before = count(peer)
            send_and_handle(peer, sock, data)
            sent += 1
            assert count(peer) == (before[0], before[1] + 1), "a malformed message was not dropped"

        start = time.monotonic()
        feed()
        assert sent >= 1000 and count(peer) == (0, sent)
        assert sum(peer.drop_reasons.values()) == sent and "internal" not in peer.drop_reasons
        assert {"codec:bad-magic", "codec:truncated", "codec:not-finite", "identity",
                "artifact"} <= set(peer.drop_reasons), peer.drop_reasons
        # and the peer still works afterwards
        send_and_handle(peer, sock, blob)
        assert count(peer) == (1, sent)
        print(f"{sent} malformed messages in {time.monotonic() - start:.1f} s: {dict(peer.drop_reasons)}")
    finally:
        peer.close()


def test_a_peer_accepts_an_artifact_only_with_the_signing_key_bound_to_the_senders_curve_key(tmp_path, ctx):
    """Peer 1's CURVE key gets a frame through, but its artifact is cached only when signed with
    the signing key peer 1's ``.key`` file holds (derived from peer 1's CURVE secret)."""
    peer = live_peer(tmp_path)
    try:
        one = client(ctx, peer.config.listen, tmp_path / "keys/peer-0.key", tmp_path / "keys/peer-1.key_secret")
        make_keys(tmp_path / "stranger", ["peer-1"])   # another key pair under peer 1's name
        for keys in (None, tmp_path / "stranger"):
            send_and_handle(peer, one, valid_message(sender=1, keys=keys)[1])
        assert count(peer) == (0, 2) and peer.drop_reasons == {"bad-signature": 2} and 1 not in peer.algo.cache
        send_and_handle(peer, one, valid_message(sender=1, keys=tmp_path / "keys")[1])
        assert count(peer) == (1, 2) and 1 in peer.algo.cache
    finally:
        peer.close()


def test_a_neighbours_key_file_without_a_signing_key_is_one_line_naming_it(tmp_path):
    path = write_peer_files(tmp_path)[0]
    key = tmp_path / "keys" / "peer-2.key"
    key.write_text("".join(line for line in key.read_text().splitlines(True) if "signing-key" not in line))
    with pytest.raises(ValueError, match=r"peer-0.yaml: neighbours.1.public_key: .*peer-2.key: holds no signing key"):
        Peer(load_peer_config(path))
    Peer(load_peer_config(path), insecure=True).close()   # unsigned without CURVE
