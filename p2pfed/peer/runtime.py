"""One real peer: the simulator's device loop on a wall clock and tcp ZeroMQ sockets.

Each round the peer runs its device through the same ``DeviceLoop`` as the simulator (fuse what
arrived → train → evaluate → share), sends the share to its neighbours, then waits (bounded) for
this round's artifacts from each live neighbour, and checkpoints. Every incoming frame goes
through the same ``Intake`` as in the simulator — with the CURVE key that sent it as the link's
peer — and every event reaches the same ``Recorder``, live. Only the clock and the sockets
differ from a simulated device, as SimPy's ``RealtimeEnvironment`` differs from ``Environment``.

Why the waits are bounded: a neighbour that vanished must never block the others. A neighbour
that misses a round's deadline counts as absent and is not waited for again until it sends.
A peer restarted from its checkpoint asks its neighbours to send again what they shared from the
round it resumes at (``peer/recovery.py``): what reached it after the checkpoint died with it.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import asdict
from typing import Any

import zmq

from p2pfed.algorithms import Received
from p2pfed.device import (Control, DeviceLoop, Held, Intake, IntakeRules, ResendRequest, encode_resend_request,
                           full_model_bytes)
from p2pfed.peer.build import build_peer_device, peer_energy_meter
from p2pfed.peer.clock import CLOCK_KINDS, ClockProbe, WallClock, late_start_problem
from p2pfed.peer.config import LoadedPeerConfig
from p2pfed.peer.identity import checkpoint_fingerprint, file_hash
from p2pfed.peer.recovery import RecoveryCounters, SentFrames
from p2pfed.peer.results import write_results
from p2pfed.peer.signing import peer_signing
from p2pfed.peer.sockets import PeerSockets
from p2pfed.peer.state import PeerCheckpoint
from p2pfed.results.attack_success import device_view
from p2pfed.results.recorder import DeviceCounters, Recorder
from p2pfed.results.files import write_json
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.loader import fingerprint
from p2pfed.scenario.spec import RunSpec
from p2pfed.scenario.threads import apply_torch_threads
from p2pfed.transport import Rejected

log = logging.getLogger("p2pfed.peer")

POLL_SLICE_S = 0.5   # how often the wait loop re-checks its deadline


def insecure_warning(what: str) -> None:
    print(f"\n*** WARNING: {what} runs WITHOUT encryption or authentication (--insecure): anyone who "
          "can reach its port can send it artifacts. Use only on a trusted, isolated network. ***\n",
          file=sys.stderr, flush=True)


class Peer(PeerCheckpoint):
    """One device as a process: its algorithm, its sockets, its counters and its loop."""

    def __init__(self, loaded_config: LoadedPeerConfig, *, insecure: bool = False, spec: RunSpec | None = None) -> None:
        """``spec``: the peer's scenario, already loaded (else loaded from the config)."""
        self.created_at = time.monotonic()   # how long loading takes, said when a shared start passed meanwhile
        cfg = self.config = loaded_config.config
        self.wall = WallClock(cfg.clock_offset_s)   # every time of day this peer reads (peer/clock.py)
        self.secure, self.source = not insecure, loaded_config.source
        built = build_peer_device(loaded_config, spec)
        self.loaded, self.algo, self.visible_classes = built.loaded, built.algo, built.visible_classes
        self.class_counts = built.class_counts
        sc = self.loaded.scenario
        self.name = self.algo.ctx.device.name
        self.full_model_bytes = full_model_bytes(self.algo.ctx.model, sc.engine.precision)
        self.out = loaded_config.resolve(cfg.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.checkpoint_path = self.out / "checkpoint.pt"
        self.fingerprint = checkpoint_fingerprint(cfg.id, fingerprint(self.loaded), cfg.run_id)
        self.scenario_hash = None if cfg.scenario is None else file_hash(loaded_config.resolve(cfg.scenario))
        self.endpoints = {n.id: n.endpoint for n in cfg.neighbours}
        self.start_time = cfg.start_time if cfg.start_time is not None else self.wall.now()
        self.signing = peer_signing(loaded_config, secure=self.secure, sign=sc.security.sign_artifacts)
        self.recorder, self.loop, self.intake = self._device(built.num_devices)
        self.latest: dict[int, int] = {}       # newest round received per neighbour
        self.absent: set[int] = set()
        self.timed_out: list[list[Any]] = []   # [round, the neighbours no longer waited for then]
        self.resumed_from: list[int] = []
        self.send_failed = 0
        self.sent_frames = SentFrames()
        self.recovery = RecoveryCounters()
        self.next_round = self.next_round_at_start = 0
        self.energy = peer_energy_meter(self.loaded, cfg.id, self.recorder, loaded_config.source)
        if self.energy is not None:
            self.energy.clock = lambda: self.wall.now() - self.start_time
            self.loop.count_work = True
        apply_torch_threads(sc.engine.torch_threads, batched=False)
        self.sockets = PeerSockets(loaded_config, self.endpoints, secure=self.secure,
                                   max_bytes=sc.engine.max_message_bytes, on_reject=self._rejected)
        self.mailbox, self.outbox = self.sockets.mailbox, self.sockets.outbox
        self.clock = ClockProbe(cfg.id, sc.engine.max_message_bytes)

    def _device(self, num_devices: int) -> tuple[Recorder, DeviceLoop, Intake]:
        """The recorder, device loop and intake of a peer in synchronous rounds (wall-clock times)."""
        cfg, sc = self.config, self.loaded.scenario
        recorder = Recorder([cfg.id], time_origin=self.start_time)
        loop = DeviceLoop(cfg.id, self.algo, recorder, clock=self.wall.now,
                          max_message_bytes=sc.engine.max_message_bytes,
                          neighbours=lambda: sorted(n for n in self.endpoints if n not in self.ignored),
                          visible_classes=self.visible_classes,
                          evaluate_when=sc.evaluation.when, evaluate_both=sc.evaluation.both,
                          precision=sc.engine.precision, signer=self.signing.signer)
        intake = Intake(cfg.id, self.algo, recorder,
                        IntakeRules(sc.engine.max_message_bytes, rounds=sc.rounds,
                                    max_bad_messages=cfg.max_bad_messages, contain_errors=True,
                                    hold_later_rounds=True, keyring=self.signing.keyring,
                                    control_kinds=CLOCK_KINDS),
                        is_neighbour=self.endpoints.__contains__, on_ignore=self._disconnect)
        return recorder, loop, intake

    def _radio_busy(self) -> None:
        if self.energy is not None:   # a message's moment on the wire (its duration is the network's)
            now = self.wall.now() - self.start_time
            self.energy.radio_busy(0, now, now)

    # -- sockets -----------------------------------------------------------------------------
    def close(self) -> None:
        """Close sockets without lingering (idempotent)."""
        self.sockets.close()

    # -- what the tests and reports read ---------------------------------------------------------
    @property
    def counters(self) -> DeviceCounters:
        return self.recorder.devices[0]

    @property
    def drop_reasons(self):
        return self.recorder.drop_reasons

    @property
    def bad(self):
        return self.intake.bad

    @property
    def ignored(self) -> set[int]:
        return self.intake.ignored

    # -- messages ----------------------------------------------------------------------------
    def _disconnect(self, who: int) -> None:
        if who in self.endpoints:
            self.outbox.disconnect(self.endpoints[who])

    def authenticated(self, frame: zmq.Frame, round: int) -> tuple[bool, int | None]:
        """(usable, the peer id CURVE authenticated the frame's sender as; None when insecure). A
        secure frame without one is refused, counted under ``round``."""
        if not self.secure:
            return True, None
        try:
            return True, int(frame.get("User-Id"))
        except (zmq.ZMQError, ValueError, TypeError):
            self.intake.refuse(None, round, "identity", "no authenticated peer id on the message")
            return False, None

    def handle(self, frame: zmq.Frame) -> bool:
        """Take one incoming frame in through the intake; True if it was accepted."""
        usable, who = self.authenticated(frame, self.next_round)
        if not usable:
            return False
        self._radio_busy()
        item = self.intake.take(frame.bytes, link=who, now=self.wall.now(), round=self.next_round)
        if item is None:
            return False
        if isinstance(item, ResendRequest):
            self._answer(item)
            return True
        if isinstance(item, Control):   # a neighbour's clock ping, or its answer to this peer's
            for data in self.clock.take(item, self.wall.now()):
                self.outbox.send(self.endpoints[item.sender], data, timeout_ms=0)
            return True
        if isinstance(item, Received) and item.round < self.next_round:   # its fusion (round item.round + 1) is past
            self.recorder.late(self.config.id)
        self._heard(item)
        return True

    def _heard(self, item: Received | Held) -> None:
        """A neighbour's artifact of ``item.round`` is in (cached, or held for a later round)."""
        self.latest[item.sender] = max(self.latest.get(item.sender, -1), item.round)
        self.absent.discard(item.sender)

    def _rejected(self, rejected: Rejected) -> None:
        """A frame the mailbox refused before decoding (oversized, multipart): a counted drop."""
        who = None
        if self.secure and rejected.sender is not None:
            try:
                who = int(rejected.sender)
            except ValueError:
                pass
        self.intake.refuse(who, self.next_round, f"transport:{rejected.reason}",
                           f"{rejected.nbytes} bytes refused by the mailbox")

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

    def _answer(self, request: ResendRequest) -> None:
        """Send a restarted neighbour again what this peer shared from its resume round on."""
        frames = self.sent_frames.for_request(request.sender, request.from_round, self.next_round)
        if frames is None:
            return
        self.recovery.requests_answered += 1
        for data in frames:
            if self.outbox.send(self.endpoints[request.sender], data, timeout_ms=0):
                self.recovery.frames_resent += 1
                self.recovery.bytes_resent += len(data)

    def _ask_to_resend(self) -> None:
        """After a restart: ask every neighbour for its frames from the round this peer resumes at."""
        request = encode_resend_request(self.config.id, self.next_round, self.wall.now(),
                                        self.loaded.scenario.engine.max_message_bytes)
        for nid, endpoint in sorted(self.endpoints.items()):
            if nid not in self.ignored and self.outbox.send(endpoint, request, timeout_ms=0):
                self.recovery.requests_sent += 1

    def _share(self, data: bytes, r: int, to: int | None = None) -> None:
        """Send to every neighbour, or only to ``to`` when the part is addressed."""
        me = self.config.id
        self.sent_frames.keep(r, to, data)
        for nid, endpoint in sorted(self.endpoints.items()):
            if nid in self.ignored or (to is not None and nid != to):
                continue
            # Counted like the simulator (once per destination, whether or not it arrives).
            self.recorder.sent(me, len(data), r)
            self.recorder.transfer_started(me)
            if self.outbox.send(endpoint, data, timeout_ms=0):
                self.recorder.transfer_completed(me)
                self._radio_busy()
            else:
                self.send_failed += 1

    def _sleep_until(self, t: float) -> None:
        """Keep receiving until monotonic time ``t``."""
        while (left := t - time.monotonic()) > 0:
            self.poll(min(left, POLL_SLICE_S))

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
                self.timed_out.append([r, sorted(waiting)])
                return
            self.poll(min(left, POLL_SLICE_S))
            self.recorder.drop_log.tick()   # a held-back summary need not wait for the next drop

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Run the remaining rounds (resuming from the checkpoint if any); write results."""
        sc = self.loaded.scenario
        self._resume()
        self.next_round_at_start = self.next_round
        if self.resumed_from:
            self._ask_to_resend()
        for endpoint in self.endpoints.values():   # each neighbour's clock, read while they start
            self.outbox.send(endpoint, self.clock.ping(self.wall.now()), timeout_ms=0)
        period, paced_from = self.config.round_period_s, None
        if self.config.shared_grid:   # round r from start_time + r periods, on every peer alike
            paced_from = self.wall.monotonic_at(self.start_time)
            self._start_on_grid(paced_from + self.next_round * period)
        for r in range(self.next_round, sc.rounds):
            evaluate = (r + 1) % sc.evaluation.every == 0 or r == sc.rounds - 1
            for item in self.intake.release(r - 1, now=self.wall.now()):   # what neighbours shared up to r-1
                self._heard(item)
            outgoing = self.loop.act(r, evaluate=evaluate)
            if self.energy is not None:
                self.energy.charge_step(0, self.loop.work_flops, self.loop.fusion_flops)
            for out in outgoing:
                self._share(out.data, r, to=out.to)
            if outgoing and not self.config.shared_grid:   # the same method everywhere: none waits if none shares
                self._wait_for(r)
            # Pacing on one grid, as the simulator's rounds: the first round of this run ends when its
            # wait does (for a fresh start, the barrier at which every neighbour has shared round 0),
            # and round r ends (r - first) periods later, however long each round took, so peers that
            # started at different times do not stay offset by it. On a shared grid every peer's
            # round r ends at start_time + (r + 1) periods and nobody is waited for.
            if paced_from is None:
                paced_from = time.monotonic() - (r + 1) * period
            self._sleep_until(paced_from + (r + 1) * period)
            self.recorder.drop_log.tick()   # a held-back summary need not wait for the next drop
            if self.energy is not None:
                self.energy.snapshot(r)
            self.next_round = r + 1
            self._save()
            log.info("peer %d: round %d done at %.1f s; artifacts of it from %s", self.config.id, r,
                     self.wall.now() - self.start_time, sorted(n for n, last in self.latest.items() if last >= r))
        # what neighbours shared in the last round while this peer was a round behind (after a
        # restart) is held: taken in now, it is received as in a run without the restart
        for item in self.intake.release(sc.rounds - 1, now=self.wall.now()):
            self._heard(item)
        return self.finish()

    def _start_on_grid(self, at: float) -> None:
        """Wait for this run's first round on the shared grid (monotonic ``at``), reading the
        neighbours' clocks meanwhile; refuse a fresh start whose shared start already passed, or
        neighbours' clocks too far off this one's (``peer/clock.py``)."""
        period = self.config.round_period_s
        if self.next_round == 0 and (late := late_start_problem(self.start_time, self.wall.now(), period,
                                                                time.monotonic() - self.created_at, self.source)):
            raise ScenarioError([late])
        self._sleep_until(at)
        for warning in self.clock.grid_warnings(sorted(self.endpoints), period, self.source):
            log.warning(warning)

    def report(self) -> dict[str, Any]:
        """This peer's ``peer.json``: what the launcher merges."""
        return {"id": self.config.id, "run_id": self.config.run_id, "scenario_hash": self.scenario_hash,
                "name": self.name, "recorder": self.recorder.state_dict(),
                "stats": self.algo.stats(), "ignored": sorted(self.ignored),
                "resumed_from": self.resumed_from, "send_failed": self.send_failed,
                "start_time": self.start_time, "rounds_done": self.next_round, "timed_out": self.timed_out,
                "latest": {str(k): v for k, v in sorted(self.latest.items())},   # newest round heard per neighbour
                "never_heard": sorted(set(self.endpoints) - self.recorder.heard_by(self.config.id)),
                "clock_offsets": self.clock.report(),   # each neighbour's clock minus this one's
                "recovery": asdict(self.recovery), "class_counts": self.class_counts,
                "secure": self.secure, "full_model_bytes": self.full_model_bytes,
                "energy": None if self.energy is None else self.energy.state_dict(),
                # recall per class and cluster-mates, judged by the launcher when the scenario has liars
                "attack_view": device_view(self.algo) if self.loaded.scenario.adversaries else None}

    def finish(self) -> dict[str, Any]:
        report = self.report()
        if report["never_heard"]:
            log.warning("peer %d: not one message came from neighbours %s in the whole run", self.config.id,
                        report["never_heard"])
        self.recorder.drop_log.flush()
        write_json(self.out / "peer.json", report, indent=1)
        return write_results(self.out, self.loaded, [report], wall_time_s=self.wall.now() - self.start_time,
                             full_model_bytes=self.full_model_bytes,
                             runtime={"kind": "peer", "peer": self.config.id, "run_id": self.config.run_id,
                                      "secure": self.secure, "never_heard": report["never_heard"],
                                      "clock_offsets": report["clock_offsets"],
                                      "resumed_from": self.resumed_from, "recovery": asdict(self.recovery)})

