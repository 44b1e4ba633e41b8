"""Checkpoint data of a contact run's parts: the small values each part saves (what a device
holds, an offer, a share waiting to leave, a pending timeout), as tensors, numbers and lists
that ``torch.load(weights_only=True)`` reads back."""

from __future__ import annotations

import math
from typing import Any

import simpy
import torch

from p2pfed.device import Outgoing
from p2pfed.device.exchange import Frame, Offer, PartKey, Version

Pending = list[float | int]   # [time, SimPy's creation id] of a scheduled event


def have_state(have: dict[PartKey, Version]) -> list[list[Any]]:
    return [[o, p, r, s] for (o, p), (r, s) in sorted(have.items())]


def have_from_state(saved: list[list[Any]]) -> dict[PartKey, Version]:
    return {(int(o), str(p)): (int(r), float(s)) for o, p, r, s in saved}


def bytes_state(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)


def offer_state(o: Offer) -> dict[str, Any]:
    return {"origin": o.origin, "part": o.part, "round": o.round, "sent_at": o.sent_at,
            "to": -1 if o.to is None else o.to, "frame": bytes_state(o.frame.data)}


def offer_from_state(o: dict[str, Any]) -> Offer:
    return Offer(int(o["origin"]), str(o["part"]), int(o["round"]), float(o["sent_at"]),
                 Frame(o["frame"].numpy().tobytes()), None if o["to"] < 0 else int(o["to"]))


def outgoing_state(o: Outgoing) -> dict[str, Any]:
    return {"part": o.part, "round": o.round, "sent_at": o.sent_at, "data": bytes_state(o.data),
            "to": -1 if o.to is None else o.to, "origin": -1 if o.origin is None else o.origin}


def outgoing_from_state(o: dict[str, Any]) -> Outgoing:
    return Outgoing(str(o["part"]), int(o["round"]), float(o["sent_at"]), o["data"].numpy().tobytes(),
                    None if o["to"] < 0 else int(o["to"]), None if o["origin"] < 0 else int(o["origin"]))


def timeout_at(env: simpy.Environment, t: float) -> simpy.Event:
    """A timeout due at exactly ``t``: SimPy adds the delay to ``now``, which may round, so the
    delay is nudged by ulps until the sum is ``t`` (the sum is monotone in the delay)."""
    delay = t - float(env.now)
    while float(env.now) + delay < t:
        delay = math.nextafter(delay, math.inf)
    while float(env.now) + delay > t:
        delay = math.nextafter(delay, -math.inf)
    return env.timeout(max(delay, 0.0))
