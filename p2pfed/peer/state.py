"""A real peer's checkpoint: written whole at the end of every round, read back on a restart.

It holds the device (model, method state), the intake's view of what arrived, the frames kept
for a restarted neighbour, the recorder and the peer's own bookkeeping (who it heard from last,
who it stopped waiting for, what it re-sent), so a peer killed at any instant resumes at the
round after its last checkpoint as if it had not stopped.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from p2pfed.device import DeviceLoop, Intake, load_checkpoint, save_checkpoint
from p2pfed.device.energy import EnergyMeter
from p2pfed.peer.clock import WallClock
from p2pfed.peer.config import PeerConfig
from p2pfed.peer.recovery import RecoveryCounters, SentFrames
from p2pfed.results.files import write_json
from p2pfed.results.recorder import Recorder

log = logging.getLogger("p2pfed.peer")


class PeerCheckpoint:
    """The save and resume half of a peer (``Peer`` sets every attribute below)."""

    config: PeerConfig
    wall: WallClock
    out: Path
    checkpoint_path: Path
    fingerprint: str
    next_round: int
    loop: DeviceLoop
    intake: Intake
    sent_frames: SentFrames
    recorder: Recorder
    energy: EnergyMeter | None
    latest: dict[int, int]
    resumed_from: list[int]
    send_failed: int
    start_time: float
    recovery: RecoveryCounters
    timed_out: list[list[Any]]

    def _save(self) -> None:
        runtime = {"latest": {str(k): v for k, v in self.latest.items()}, "resumed_from": self.resumed_from,
                   "send_failed": self.send_failed, "start_time": self.start_time,
                   "recovery": asdict(self.recovery), "timed_out": self.timed_out}
        state = {"next_round": self.next_round, "device": self.loop.state_dict(),
                 "intake": self.intake.state_dict(), "sent_frames": self.sent_frames.state_dict(),
                 "recorder": json.dumps(self.recorder.state_dict(), allow_nan=False),
                 "runtime": json.dumps(runtime, allow_nan=False)}
        if self.energy is not None:
            state["energy"] = json.dumps(self.energy.state_dict())
        save_checkpoint(self.checkpoint_path, "peer", self.fingerprint, state)
        # rounds done so far, for whoever watches the run (a launcher injecting faults by round)
        write_json(self.out / "progress.json", {"rounds_done": self.next_round, "time": self.wall.now()})

    def _resume(self) -> None:
        if not self.checkpoint_path.exists():
            return
        state = load_checkpoint(self.checkpoint_path, "peer", self.fingerprint)
        self.next_round = int(state["next_round"])
        self.loop.load_state_dict(state["device"])
        self.intake.load_state_dict(state["intake"])
        self.sent_frames.load_state_dict(state["sent_frames"])
        self.recorder.load_state_dict(json.loads(state["recorder"]))
        if self.energy is not None:
            self.energy.load_state_dict(json.loads(state["energy"]))
        runtime = json.loads(state["runtime"])
        self.latest = {int(k): v for k, v in runtime["latest"].items()}
        self.send_failed = runtime["send_failed"]
        self.start_time = runtime["start_time"]
        self.recovery = RecoveryCounters(**runtime["recovery"])
        self.timed_out = runtime.get("timed_out", [])
        self.resumed_from = runtime["resumed_from"] + [self.next_round]
        log.warning("peer %d resumes from its checkpoint at round %d", self.config.id, self.next_round)
