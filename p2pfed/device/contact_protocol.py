"""The contact protocol's own messages, and what carrying a message costs on a TCP link: one
definition for both contact runtimes.

Real peers (``peer.contacts``) must tell each other what they hold when a contact opens (a
summary vector, ``contact/have``) and acknowledge every transfer they take in (``contact/ack``)
before the next is sent. The contact simulator reads both off its own state unless
``contacts.protocol`` is ``acknowledged``; then it sends these same messages, built here, on
modelled links (``engine.contact_lines``), so both runtimes count the same bytes.

``wire_bytes`` is what a message occupies on a link beyond its encoded bytes: a ZeroMQ frame
header and CurveZMQ's MESSAGE command (its name, nonce and authentication tag) per message, and
TCP/IPv4 headers with the timestamp option per segment. TCP's own acknowledgements, which travel
the other way, and each connection's handshakes are not counted.
"""

from __future__ import annotations

import math
from typing import Any

from p2pfed.device.exchange import PartKey, Version
from p2pfed.device.wire import ACK_KIND, HAVE_KIND, RELAY_KEY, encode_control
from p2pfed.network.slow_start import SEGMENT_BYTES
from p2pfed.transport import Message

# ZMTP 3.1 long-frame header (9) + CurveZMQ MESSAGE: command name (8), nonce (8), tag (16), flags (1)
FRAMING_BYTES = 42
HEADER_BYTES = 52      # IPv4 (20) + TCP (20) + timestamp option (12) per segment


def wire_bytes(encoded: int) -> int:
    """Bytes a message of ``encoded`` bytes puts on a link (see the module's docstring)."""
    framed = encoded + FRAMING_BYTES
    return framed + HEADER_BYTES * max(1, math.ceil(framed / SEGMENT_BYTES))


def summary_vector(sender: int, have: dict[PartKey, Version], contact_start: float, sent_at: float,
                   max_bytes: int) -> bytes:
    """``contact/have``: what ``sender`` has received, naming the contact (by its start) it opens."""
    entries = [[o, part, r, t] for (o, part), (r, t) in sorted(have.items())]
    return encode_control(HAVE_KIND, sender, sent_at, {"have": entries, "contact": contact_start}, max_bytes)


def acknowledgement(sender: int, received_bytes: int, msg: Message | None, sent_at: float, max_bytes: int) -> bytes:
    """``contact/ack``: ``sender`` took in a transfer of ``received_bytes`` bytes; ``msg`` (None when
    it did not decode) names the part and version taken."""
    meta: dict[str, Any] = {"bytes": received_bytes}
    if msg is not None:
        origin = origin_of(msg)
        if origin is not None:
            meta.update(origin=origin, part=str(msg.meta.get("part", "whole")), round=msg.round, sent_at=msg.sent_at)
    return encode_control(ACK_KIND, sender, sent_at, meta, max_bytes)


def origin_of(msg: Message) -> int | None:
    """The device that made a message's part: its relay's origin for a carried copy."""
    relay = msg.meta.get(RELAY_KEY)
    origin = relay.get("origin") if isinstance(relay, dict) else msg.sender
    return origin if isinstance(origin, int) else None
