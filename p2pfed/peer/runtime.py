"""One real peer: the simulator's device loop on a wall clock and tcp ZeroMQ sockets.

The loop is the simulator's, in the open: train → share → wait (bounded) for this round's
artifacts from each live neighbour → fuse → evaluate → checkpoint. The algorithm object, the
codec and the results files are the simulator's; only the clock and the sockets differ.

Why the waits are bounded: a neighbour that vanished must never block the others. A neighbour
that misses a round's deadline counts as absent and is not waited for again until it sends.

Every incoming message is checked in this order: not from an ignored peer; decodes (size,
dtypes, shapes, finite values — never unpickled); the id it claims is the CURVE key that sent it
(ZAP User-Id) and a neighbour; the method's kind; the method's ``check_payload`` against the
local model. A failure drops the message, counts it with a reason and logs it with the peer's id;
a peer with more than ``max_bad_messages`` failures is ignored from then on.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import zmq

from p2pfed.algorithms.base import ArtifactError, Payload, Received
from p2pfed.engine.runner import full_model_bytes
from p2pfed.peer import checkpoint
from p2pfed.peer.config import LoadedPeerConfig
from p2pfed.peer.data import load_own_data
from p2pfed.peer.keys import AllowlistAuthenticator, client_configurer, load_pair, load_public, server_configurer
from p2pfed.peer.results import round_entry, write_results
from p2pfed.results.recorder import DeviceCounters
from p2pfed.scenario.build import build_algorithm, build_class_schedule, load_scenario_dataset
from p2pfed.scenario.loader import ScenarioError, dump, load_scenario
from p2pfed.transport import CodecError, Mailbox, Message, Outbox, decode, encode

log = logging.getLogger("p2pfed.peer")

SNDHWM = 50          # messages queued per neighbour before new ones are dropped
POLL_SLICE_S = 0.5   # how often the wait loop re-checks its deadline


def insecure_warning(what: str) -> None:
    print(f"\n*** WARNING: {what} runs WITHOUT encryption or authentication (--insecure): anyone who "
          "can reach its port can send it artifacts. Use only on a trusted, isolated network. ***\n",
          file=sys.stderr, flush=True)


class IdentityError(ArtifactError):
    """A message whose claimed sender is not the key it came with, or not a neighbour."""


class Peer:
    """One device as a process: its algorithm, its sockets, its counters and its loop."""

    def __init__(self, loaded_config: LoadedPeerConfig, *, insecure: bool = False) -> None:
        cfg = self.config = loaded_config.config
        self.secure = not insecure
        self.loaded = load_scenario(loaded_config.resolve(cfg.scenario), cfg.overrides, cfg.seed)
        sc = self.loaded.scenario
        where = loaded_config.source
        if sc.engine.participation < 1:
            raise ScenarioError([f"{where}: scenario engine.participation: real peers always take part "
                                 f"(got {sc.engine.participation}); set it to 1"])
        dataset = load_scenario_dataset(self.loaded)
        device = None
        if cfg.data is not None:
            device = load_own_data(loaded_config.resolve(cfg.data.path), cfg.id,
                                   num_features=dataset.num_features, num_classes=dataset.num_classes,
                                   test_fraction=cfg.data.test_fraction, seed=sc.seed)
        elif cfg.id >= len(dataset.devices):
            raise ScenarioError([f"{where}: id: the scenario has devices 0..{len(dataset.devices) - 1}, "
                                 f"got {cfg.id} (or give data.path)"])
        self.algo = build_algorithm(self.loaded, dataset, cfg.id, device=device)
        # Dynamic data follows the same schedule as in the simulator (a peer with its own data
        # keeps it whole: the schedule was drawn for the scenario's devices).
        schedule = build_class_schedule(self.loaded, dataset) if device is None else None
        self.visible_classes = (lambda r: schedule.visible(cfg.id, r)) if schedule else None
        self.name = self.algo.ctx.device.name
        self.full_model_bytes = full_model_bytes(self.algo.ctx.model)
        self.out = loaded_config.resolve(cfg.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.checkpoint_path = self.out / "checkpoint.pt"
        self.fingerprint = json.dumps({"peer": cfg.id, "scenario": dump(self.loaded)}, sort_keys=True)
        self.endpoints = {n.id: n.endpoint for n in cfg.neighbours}
        self.counters = DeviceCounters()
        self.drop_reasons: Counter = Counter()
        self.bad: Counter = Counter()          # failures per (authenticated or claimed) peer id
        self.ignored: set[int] = set()
        self.latest: dict[int, int] = {}       # newest round received per neighbour
        self.absent: set[int] = set()
        self.history: list[dict[str, Any]] = []
        self.resumed_from: list[int] = []
        self.send_failed = 0
        self.start_time = cfg.start_time if cfg.start_time is not None else time.time()
        self.next_round = self.next_round_at_start = 0
        torch.set_num_threads(sc.engine.torch_threads)
        self._open_sockets(loaded_config)

    # -- sockets -----------------------------------------------------------------------------
    def _open_sockets(self, loaded_config: LoadedPeerConfig) -> None:
        cfg = self.config
        self.context = zmq.Context()
        self.auth: AllowlistAuthenticator | None = None
        server = client = None
        if self.secure:
            public, secret = load_pair(loaded_config.resolve(cfg.secret_key))
            keys = {n.id: load_public(loaded_config.resolve(n.public_key)) for n in cfg.neighbours}
            self.auth = AllowlistAuthenticator(self.context, {k: i for i, k in keys.items()})
            self.auth.start()
            server = server_configurer(public, secret)
            by_endpoint = {self.endpoints[i]: k for i, k in keys.items()}
            client = client_configurer(public, secret, by_endpoint)
        max_bytes = self.loaded.scenario.engine.max_message_bytes
        try:
            self.mailbox = Mailbox(self.context, cfg.listen, max_bytes=max_bytes, configure=server)
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
            self.context.term()

    # -- messages ----------------------------------------------------------------------------
    def _drop(self, who: int | None, reason: str, detail: str) -> None:
        self.counters.messages_dropped += 1
        self.drop_reasons[reason] += 1
        name = "an unknown peer" if who is None else f"peer {who}"
        log.warning("peer %d dropped a message from %s: %s %s", self.config.id, name, reason, detail)
        if who is None or reason == "ignored":
            return
        self.bad[who] += 1
        if self.bad[who] > self.config.max_bad_messages and who not in self.ignored:
            self.ignored.add(who)
            if who in self.endpoints:
                self.outbox.disconnect(self.endpoints[who])
            log.error("peer %d disconnects peer %d after %d bad messages; it is ignored from now on",
                      self.config.id, who, self.bad[who])

    def handle(self, frame: zmq.Frame) -> bool:
        """Check one incoming message and hand it to the algorithm; True if it was accepted."""
        who: int | None = None
        if self.secure:
            try:
                who = int(frame.get("User-Id"))
            except (zmq.ZMQError, ValueError, TypeError):
                self._drop(None, "identity", "no authenticated peer id on the message")
                return False
        if who in self.ignored:
            self._drop(who, "ignored", "")
            return False
        data = frame.bytes
        try:
            msg = decode(data, max_bytes=self.loaded.scenario.engine.max_message_bytes)
            if not self.secure and msg.sender in self.endpoints:
                who = msg.sender  # unauthenticated: the best attribution there is
                if who in self.ignored:
                    self._drop(who, "ignored", "")
                    return False
            if who is not None and msg.sender != who:
                raise IdentityError(f"claims to be peer {msg.sender} but was sent with peer {who}'s key")
            if msg.sender not in self.endpoints:
                raise IdentityError(f"claims to be peer {msg.sender}, not a neighbour")
            if msg.round >= self.loaded.scenario.rounds:
                raise ArtifactError(f"round {msg.round} is past the run's {self.loaded.scenario.rounds} rounds")
            if msg.kind != self.algo.message_kind:
                raise ArtifactError(f"kind {msg.kind!r}, expected {self.algo.message_kind!r}")
            self.algo.receive(Received(sender=msg.sender, round=msg.round, sent_at=msg.sent_at,
                                       received_at=time.time(),
                                       payload=Payload(dict(msg.meta), dict(msg.tensors))))
        except CodecError as exc:
            self._drop(who, f"codec:{exc.reason}", str(exc))
            return False
        except IdentityError as exc:
            self._drop(who, "identity", str(exc))
            return False
        except ArtifactError as exc:
            self._drop(who, "artifact", str(exc))
            return False
        except Exception as exc:  # a peer's bytes must never crash this process
            log.exception("peer %d: unexpected error on a message", self.config.id)
            self._drop(who, "internal", f"{type(exc).__name__}: {exc}")
            return False
        self.counters.bytes_received += len(data)
        self.counters.messages_received += 1
        self.latest[msg.sender] = max(self.latest.get(msg.sender, -1), msg.round)
        self.absent.discard(msg.sender)
        return True

    def poll(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a message, then handle it and all queued behind it;
        False if none came."""
        frame = self.mailbox.receive_frame(int(timeout_s * 1000))
        if frame is None:
            return False
        self.handle(frame)
        while (frame := self.mailbox.receive_frame(0)) is not None:
            self.handle(frame)
        return True

    def _share(self, r: int, payload: Payload) -> None:
        msg = Message(kind=self.algo.message_kind, sender=self.config.id, round=r, sent_at=time.time(),
                      meta=payload.meta, tensors=payload.tensors)
        data = encode(msg, max_bytes=self.loaded.scenario.engine.max_message_bytes)
        for nid, endpoint in sorted(self.endpoints.items()):
            if nid in self.ignored:
                continue
            # Counted like the simulator (once per destination, whether or not it arrives).
            self.counters.bytes_sent += len(data)
            self.counters.messages_sent += 1
            if not self.outbox.send(endpoint, data, timeout_ms=0):
                self.send_failed += 1

    def _wait_for(self, r: int) -> None:
        """Until every live neighbour's round-``r`` artifacts are in, or the round's deadline."""
        # Only a fresh start waits long for neighbours to come up; a resumed peer's are running.
        fresh_start = r == self.next_round_at_start == 0
        timeout = self.config.start_timeout_s if fresh_start else self.config.round_timeout_s
        deadline = time.monotonic() + timeout
        while True:
            waiting = [n for n in self.endpoints
                       if n not in self.absent and n not in self.ignored and self.latest.get(n, -1) < r]
            if not waiting:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("peer %d, round %d: no artifacts from peers %s within %.1f s; not waiting "
                            "for them until they send again", self.config.id, r, waiting, timeout)
                self.absent.update(waiting)
                return
            self.poll(min(left, POLL_SLICE_S))

    # -- state ---------------------------------------------------------------------------------
    def _runtime_state(self) -> dict[str, Any]:
        return {"counters": vars(self.counters), "drop_reasons": dict(self.drop_reasons),
                "bad": {str(k): v for k, v in self.bad.items()}, "ignored": sorted(self.ignored),
                "latest": {str(k): v for k, v in self.latest.items()}, "history": self.history,
                "resumed_from": self.resumed_from, "send_failed": self.send_failed,
                "start_time": self.start_time}

    def _resume(self) -> None:
        if not self.checkpoint_path.exists():
            return
        self.next_round, state = checkpoint.restore(self.checkpoint_path, self.algo,
                                                    fingerprint=self.fingerprint)
        self.counters = DeviceCounters(**state["counters"])
        self.drop_reasons = Counter(state["drop_reasons"])
        self.bad = Counter({int(k): v for k, v in state["bad"].items()})
        self.ignored = set(state["ignored"])
        self.latest = {int(k): v for k, v in state["latest"].items()}
        self.history = state["history"]
        self.send_failed = state["send_failed"]
        self.start_time = state["start_time"]
        self.resumed_from = state["resumed_from"] + [self.next_round]
        log.warning("peer %d resumes from its checkpoint at round %d", self.config.id, self.next_round)

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Run the remaining rounds (resuming from the checkpoint if any); write results."""
        sc = self.loaded.scenario
        self._resume()
        self.next_round_at_start = self.next_round
        algo = self.algo
        for r in range(self.next_round, sc.rounds):
            # The simulator's round, in the same order: integrate what arrived, train, evaluate
            # the model the device now holds, share, then collect the peers' artifacts.
            round_end = time.monotonic() + self.config.round_period_s
            if self.visible_classes is not None:
                algo.ctx.set_visible_classes(self.visible_classes(r))
            algo.fuse(r, time.time())
            algo.train(r)
            evaluated = (r + 1) % sc.evaluation.every == 0 or r == sc.rounds - 1
            evaluation, evaluated_at = (algo.evaluate(), time.time()) if evaluated else (None, 0.0)
            payload = algo.share(r)
            if payload is not None:  # every peer runs the same method: none waits if none shares
                self._share(r, payload)
            if evaluation is not None:  # counters then include this round's sends, as in the simulator
                self.history.append(round_entry(r + 1, evaluated_at, evaluation, self.counters))
            if payload is not None:
                self._wait_for(r)
            while (left := round_end - time.monotonic()) > 0:  # pacing: keep receiving meanwhile
                self.poll(min(left, POLL_SLICE_S))
            self.next_round = r + 1
            checkpoint.save(self.checkpoint_path, algo, next_round=r + 1, fingerprint=self.fingerprint,
                            runtime=self._runtime_state())
        return self.finish()

    def report(self) -> dict[str, Any]:
        """This peer's ``peer.json``: what the launcher merges."""
        return {"id": self.config.id, "name": self.name, "history": self.history,
                "counters": vars(self.counters), "drop_reasons": dict(self.drop_reasons),
                "stats": self.algo.stats(), "ignored": sorted(self.ignored),
                "resumed_from": self.resumed_from, "send_failed": self.send_failed,
                "start_time": self.start_time, "rounds_done": self.next_round,
                "secure": self.secure, "full_model_bytes": self.full_model_bytes}

    def finish(self) -> dict[str, Any]:
        report = self.report()
        (self.out / "peer.json").write_text(json.dumps(report, indent=1) + "\n")
        return write_results(self.out, self.loaded, [report], start_time=self.start_time,
                             wall_time_s=time.time() - self.start_time,
                             full_model_bytes=self.full_model_bytes,
                             runtime={"kind": "peer", "peer": self.config.id, "secure": self.secure,
                                      "resumed_from": self.resumed_from})


def run_peer(config_path: str | Path, *, insecure: bool = False) -> dict[str, Any]:
    """``p2pfed peer``: run one peer to the end and return its summary."""
    from p2pfed.peer.config import load_peer_config

    loaded = load_peer_config(config_path, insecure=insecure)
    if insecure:
        insecure_warning(f"peer {loaded.config.id}")
    peer = Peer(loaded, insecure=insecure)
    # SIGTERM ends the run like Ctrl-C: sockets closed at once; the checkpoint is already on disk.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        return peer.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        peer.close()
