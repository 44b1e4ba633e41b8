"""What a device sends in a contact, and what it keeps to pass on: the same in every contact runtime.

A device holds its own latest share (``own``, one offer per part), the parts it carries for
others (``carried``, store-carry-forward) and a summary vector of what it has received (``have``:
the newest version of each origin's part; Vahdat & Becker 2000). In a contact it sends, one at a
time, the offer ``next_offer`` picks: something the peer does not have yet, not past the TTL, in
the send-policy order. The contact simulation (``engine.opportunistic``) reads the peer's
summary vector directly; a real peer gets it in a message at the start of the contact and keeps
it current from the peer's acknowledgements (``peer.contacts``). Either way the same rules pick
what goes next, so the two runtimes send the same things in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from p2pfed.algorithms import Received
from p2pfed.device.wire import encode_share, encode_signed_copy
from p2pfed.transport import CodecError, Message, decode

SEND_POLICIES = ("smallest-first", "largest-first", "whole")

Version = tuple[int, float]          # (round, sent_at) of a part: newer is larger
PartKey = tuple[int, str]            # (origin, part)


@dataclass(eq=False)
class Frame:
    """One encoded message, shared by every link it travels on. ``message`` decodes it the first
    time a receiver asks (read-only arrays, views into ``data``); a frame that does not decode
    is refused by each receiver's own intake."""

    data: bytes
    memo: dict[Any, Any] = field(default_factory=dict, repr=False)
    _decoded: Message | None = field(default=None, repr=False)
    _tried: bool = field(default=False, repr=False)

    @property
    def size(self) -> int:
        return len(self.data)

    def message(self, max_bytes: int) -> Message | None:
        if not self._tried:
            self._tried = True
            try:
                self._decoded = decode(self.data, max_bytes=max_bytes)
            except CodecError:
                self._decoded = None
        return self._decoded


@dataclass(frozen=True)
class Forwarding:
    hop_limit: int = 1                 # 1: no store-carry-forward
    parts: tuple[str, ...] = ("prototypes",)
    buffer_items: int = 64


@dataclass
class Offer:
    """One message a device can send in a contact: its own part or a carried one."""

    origin: int
    part: str
    round: int
    sent_at: float
    frame: Frame                       # encoded once, decoded once for all who receive it
    to: int | None = None              # the one peer this part is addressed to (None: any)

    @property
    def key(self) -> PartKey:
        return self.origin, self.part

    @property
    def version(self) -> Version:
        return self.round, self.sent_at


@dataclass
class Carried:
    item: Received
    part: str
    frame: Frame | None = None         # encoded lazily, once per carrier


@dataclass
class Holdings:
    """What one device can offer in a contact and what it has received."""

    own: list[Offer] = field(default_factory=list)
    carried: dict[PartKey, Carried] = field(default_factory=dict)
    have: dict[PartKey, Version] = field(default_factory=dict)


def live_carried(holdings: Holdings, now: float, ttl: float | None) -> list[Carried]:
    """Carried items, after dropping those past the TTL (they free buffer room)."""
    carried = holdings.carried
    if ttl is not None:
        for key in [k for k, c in carried.items() if now - c.item.sent_at > ttl]:
            del carried[key]
    return list(carried.values())


def next_offer(holdings: Holdings, src: int, dst: int, dst_have: dict[PartKey, Version], now: float, *,
               ttl: float | None, policy: str, carried_offer: Callable[[Carried], Offer]) -> Offer | None:
    """What ``src`` sends ``dst`` next (the first in send-policy order, its own parts before
    carried ones of the same size), None if nothing:
    not ``dst``'s own, addressed to it or to anyone, newer than what ``dst_have`` says it holds,
    within the TTL. ``carried_offer`` encodes a carried item (once per carrier)."""
    carried = [carried_offer(c) for c in live_carried(holdings, now, ttl)] if holdings.carried else []
    offers = [o for o in (*holdings.own, *carried) if o.origin != dst and (o.to is None or o.to == dst)
              and dst_have.get(o.key, (-1, -1.0)) < o.version
              and (ttl is None or now - o.sent_at <= ttl)]
    if not offers:
        return None
    sign = -1 if policy == "largest-first" else 1
    return min(offers, key=lambda o: (sign * o.frame.size, o.origin != src, o.origin, o.part))


def encode_carried(c: Carried, kind: str, carrier: int, max_bytes: int, precision: str) -> Offer:
    """A carried item as an offer of ``carrier``'s, marked as relayed for its origin (a signed
    item as its owner signed it)."""
    if c.frame is None:
        relay = {"origin": c.item.sender, "hops": c.item.hops + 1}
        signed = c.item.signed
        c.frame = Frame(encode_share(kind, carrier, c.item.round, c.item.sent_at, c.item.payload, max_bytes,
                                     relay=relay, precision=precision) if signed is None
                        else encode_signed_copy(kind, carrier, c.item.round, c.item.sent_at, signed, relay, max_bytes))
    return Offer(c.item.sender, c.part, c.item.round, c.item.sent_at, c.frame)


def mark_received(have: dict[PartKey, Version], offer: Offer) -> None:
    """``offer`` reached the device whose summary vector ``have`` is (even if lost or refused:
    it is not offered again)."""
    note_version(have, offer.key, offer.version)


def note_version(have: dict[PartKey, Version], key: PartKey, version: Version) -> None:
    """The summary vector ``have`` now holds ``key`` at ``version`` at least."""
    have[key] = max(have.get(key, version), version)


def keep_to_carry(holdings: Holdings, item: Received, forwarding: Forwarding) -> bool:
    """Keep a received part to pass on, if forwarding covers it and hops are left (a part
    addressed to this device is for it alone); the oldest carried items are evicted past the
    buffer's size. True when it was kept (the device has something new to offer)."""
    part = item.payload.meta.get("part", "whole")
    fw = forwarding
    if fw.hop_limit <= item.hops or part not in fw.parts or "to" in item.payload.meta:
        return False
    carried = holdings.carried
    old = carried.get((item.sender, part))
    if old is not None and (old.item.round, old.item.sent_at) >= (item.round, item.sent_at):
        return False
    carried[item.sender, part] = Carried(item, part)
    while len(carried) > fw.buffer_items:
        oldest = min(carried, key=lambda k: (carried[k].item.sent_at, k))
        del carried[oldest]
    return True
