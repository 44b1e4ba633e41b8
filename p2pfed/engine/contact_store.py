"""Store-carry-forward in a contact run: what each device offers in a contact (its own latest
share, split into parts, and the parts it carries for others), what it knows it has, and which
received parts it keeps to pass on (up to ``forwarding.hop_limit`` links from their owner and
``buffer_items`` carried items, the oldest evicted first)."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from p2pfed.algorithms import Payload, Received
from p2pfed.algorithms.state import received_from_state, received_state
from p2pfed.device import Outgoing
from p2pfed.device.exchange import (Carried, Forwarding, Holdings, Offer, PartKey, Version, encode_carried,
                                    keep_to_carry, next_offer)
from p2pfed.engine.contact_checkpoint import have_from_state, have_state, offer_from_state, offer_state


class Store:
    """Every device's holdings; ``kind(i)``: device i's message kind, for the parts it carries."""

    def __init__(self, holdings: list[Holdings], forwarding: Forwarding, kind: Callable[[int], str], *,
                 max_message_bytes: int, precision: str, send_policy: str, max_age_s: float | None) -> None:
        self.holdings = holdings
        self.forwarding = forwarding
        self.kind = kind
        self.max_message_bytes = max_message_bytes
        self.precision = precision
        self.send_policy = send_policy
        self.max_age_s = max_age_s

    def publish(self, i: int, outgoing: list[Outgoing]) -> None:
        """Device i's new share replaces what it offered of its own."""
        self.holdings[i].own = [Offer(i if out.origin is None else out.origin, out.part, out.round, out.sent_at,
                                      out.frame(), out.to) for out in outgoing]

    def keep(self, i: int, item: Received) -> bool:
        """Keep a received part to pass on; True if device i has something new to offer."""
        return keep_to_carry(self.holdings[i], item, self.forwarding)

    def next_offer(self, src: int, dst: int, dst_have: dict[PartKey, Version], now: float) -> Offer | None:
        """What ``src`` sends ``dst`` next, given what ``src`` believes ``dst`` has
        (``device.exchange.next_offer``)."""
        return next_offer(self.holdings[src], src, dst, dst_have, now, ttl=self.max_age_s, policy=self.send_policy,
                          carried_offer=lambda c: encode_carried(c, self.kind(src), src, self.max_message_bytes,
                                                                 self.precision))

    def own_index(self, src: int, offer: Offer) -> int | None:
        """Where ``offer`` is in ``src``'s own parts (None: a carried part's encoding)."""
        return next((k for k, o in enumerate(self.holdings[src].own) if o is offer), None)

    def state_dict(self) -> list[dict[str, Any]]:
        return [{"own": [offer_state(o) for o in h.own],
                 "carried": [{"part": c.part, "item": received_state(c.item)} for c in h.carried.values()],
                 "have": have_state(h.have)}
                for h in self.holdings]

    def load_state_dict(self, saved: list[dict[str, Any]], interned: MutableMapping[tuple[Any, ...], Payload]) -> None:
        """``interned``: payloads already read back, shared by identical items."""
        for h, s in zip(self.holdings, saved, strict=True):
            h.own = [offer_from_state(o) for o in s["own"]]
            h.carried = {}
            for c in s["carried"]:
                item = received_from_state(c["item"], interned)
                h.carried[item.sender, c["part"]] = Carried(item, c["part"])
            h.have = have_from_state(s["have"])
