"""What a real peer keeps of its own recent shares, so a restarted neighbour can ask for them again.

A peer checkpoints at the end of each round. Frames that reach it after that checkpoint and
before it dies die with it, and the senders cannot know. A restarted peer therefore asks every
neighbour to send again what it shared from the round it resumes at; each peer keeps the frames
of its last two rounds (a neighbour waits for the peer it is missing, so it is never further
ahead than that). The receiver's intake refuses whichever copy arrives second as a ``repeat``,
so nothing is fused twice. This recovery traffic is reported apart from the run's ``comm``
figures, which count each artifact shared once, as the simulator does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

KEPT_ROUNDS = 2


@dataclass
class RecoveryCounters:
    """Recovery traffic of one peer, reported in ``peer.json`` and the merged summary."""

    requests_sent: int = 0
    requests_answered: int = 0
    frames_resent: int = 0
    bytes_resent: int = 0


@dataclass
class SentFrames:
    """This peer's frames of its last ``KEPT_ROUNDS`` rounds: (round, addressee or None, frame)."""

    frames: list[tuple[int, int | None, bytes]] = field(default_factory=list)
    answered: dict[int, int] = field(default_factory=dict)   # peer -> this peer's round it was last answered in

    def keep(self, round: int, to: int | None, data: bytes) -> None:
        self.frames = [f for f in self.frames if f[0] > round - KEPT_ROUNDS]
        self.frames.append((round, to, data))

    def for_request(self, peer: int, from_round: int, current_round: int) -> Iterator[bytes]:
        """The kept frames a request from ``peer`` asks for. One answer per peer per round of
        this peer: a neighbour repeating its request cannot make it resend without end."""
        if self.answered.get(peer) == current_round:
            return
        self.answered[peer] = current_round
        for round, to, data in self.frames:
            if round >= from_round and to in (None, peer):
                yield data

    def state_dict(self) -> dict[str, Any]:
        # Frames as byte tensors: a checkpoint loads with torch's weights-only reader.
        return {"frames": [{"round": r, "to": -1 if to is None else to,
                            "frame": torch.frombuffer(bytearray(data), dtype=torch.uint8)}
                           for r, to, data in self.frames],
                "answered": {str(p): r for p, r in self.answered.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.frames = [(int(f["round"]), None if f["to"] < 0 else int(f["to"]), f["frame"].numpy().tobytes())
                       for f in state["frames"]]
        self.answered = {int(p): int(r) for p, r in state["answered"].items()}
