"""What devices exchange: a payload (JSON meta + named arrays) and a received, cached payload."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np

from p2pfed.transport.signing import Signed

T = TypeVar("T")
_MISSING = object()   # ``remember``: no entry yet (None is a value a build may return)


@dataclass
class Payload:
    """What a device shares: small JSON metadata plus named arrays (the codec's ``meta``/``tensors``)."""

    meta: dict[str, Any]
    tensors: dict[str, np.ndarray]
    # Received payloads: work derived from these (read-only) arrays, shared by every receiver of
    # the same decoded message (a broadcast is decoded once); methods key entries by what else
    # the work depends on, and never modify what they find here.
    memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def remember(self, key: Any, build: Callable[[], T]) -> T:
        """``memo[key]``, made by ``build()`` on first use; a build that raises (a bad array)
        leaves nothing behind, so the next receiver checks the message again."""
        found = self.memo.get(key, _MISSING)
        if found is _MISSING:
            found = self.memo[key] = build()
        return cast(T, found)


RELAY_KEY = "relay"   # meta key of a copy carried for another device: {"origin": id, "hops": n}


@dataclass
class Received:
    """A payload as cached by the receiver, with who made it and when."""

    sender: int          # the device that made the artifact (the origin, when carried by others)
    round: int
    sent_at: float
    received_at: float
    payload: Payload
    fresh: bool = True  # not yet given to a fusion
    hops: int = 1       # links travelled: 1 straight from ``sender``, more when carried by others
    parsed: Any = field(default=None, repr=False, compare=False)   # what the method's ``check`` returned
    signed: Signed | None = field(default=None, repr=False, compare=False)   # as its owner signed it (forwarded so)
    spent: bool = False   # fused and emptied (``spent_copy``): only its record is left

    def age(self, now: float) -> float:
        return now - self.sent_at

    def spent_copy(self) -> Received:
        """This payload once fused, for a method that never reads it again: its record (sender,
        round, times, hops, meta) without its arrays, what its method parsed from them or its
        signed copy, so the newest-first rule and the TTL still see it but its arrays go with the
        last holder of the message."""
        return Received(self.sender, self.round, self.sent_at, self.received_at, Payload(self.payload.meta, {}),
                        fresh=False, hops=self.hops, spent=True)
