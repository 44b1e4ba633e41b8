"""TCP's slow-start restart as a link-time model (``topology.slow_start``).

Why: a p2pfed link carries one message per round and is idle in between, and a TCP sender whose
connection was idle longer than its retransmission timeout (RTO) shrinks its congestion window
again (RFC 5681 Sec. 4.1; Linux ``tcp_cwnd_restart``: halved once per RTO of idle, never below
the initial window of 10 segments, RFC 6928). A message larger than the window then leaves in
flights, each waiting for the previous one's first acknowledgement, one round trip later, the
window doubling each time. On a fast link that is whole round trips the plain model
(latency + bytes / bandwidth) does not have: measured on the emulated LAN under Reno and CUBIC, a
41,652-byte message over 50 ms / 100 Mbit/s took 0.154 s, this model 0.152 s, the plain one
0.053 s, and every setting measured was within 4 % of this model
(``bench/results/congestion-control/``). Linux restarts the window this way while
``net.ipv4.tcp_slow_start_after_idle`` is 1 (its default) for every congestion control but BBR,
CUBIC included; BBR paces from its bandwidth estimate instead, and is not modelled.

Simplifications, each a documented choice: the RTO is one round trip plus Linux's 200 ms minimum
(``RTO_FLOOR_S``, its steady state; a young connection's is longer); the next flight leaves one
round trip after the previous one started, or when the link has sent it if that is later (then
the link, not the window, is the limit); no losses, so no congestion avoidance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

INITIAL_WINDOW_SEGMENTS = 10     # RFC 6928, Linux's TCP_INIT_CWND
SEGMENT_BYTES = 1448             # TCP payload per segment on an Ethernet path with timestamps
RTO_FLOOR_S = 0.2                # Linux's TCP_RTO_MIN


@dataclass
class Window:
    """One link direction's congestion window (segments) and when its last byte left."""

    segments: float = INITIAL_WINDOW_SEGMENTS
    last_sent_at: float = -math.inf


def restarted(window: Window, now: float, round_trip_s: float) -> float:
    """The window a message sent at ``now`` starts with: halved once per RTO the link was idle,
    never below the initial window (Linux ``tcp_cwnd_restart``)."""
    idle = now - window.last_sent_at
    if math.isinf(idle):
        return float(INITIAL_WINDOW_SEGMENTS)
    rto = round_trip_s + RTO_FLOOR_S
    segments = window.segments
    while idle > rto and segments > INITIAL_WINDOW_SEGMENTS:
        segments /= 2
        idle -= rto
    return max(segments, float(INITIAL_WINDOW_SEGMENTS))


def send(window: Window, start: float, wire_bytes: int, bandwidth_bps: float, round_trip_s: float) -> float:
    """When the last byte of a ``wire_bytes`` message leaves, sent from ``start`` in flights of the
    (restarted) window, each flight one round trip after the previous one started or when the
    link has sent it; updates ``window`` (grown by one segment per segment sent, as slow start
    grows it, and the time the last byte left)."""
    segments = segments_left = max(1, math.ceil(wire_bytes / SEGMENT_BYTES))
    per_segment_s = 8.0 * wire_bytes / segments / bandwidth_bps
    first = cwnd = restarted(window, start, round_trip_s)
    t = start
    while True:
        flight = min(math.floor(cwnd), segments_left)
        sent_at = t + flight * per_segment_s
        segments_left -= flight
        cwnd *= 2
        if segments_left == 0:
            break
        t = max(sent_at, t + round_trip_s)
    window.segments, window.last_sent_at = first + segments, sent_at   # slow start: +1 per segment acked
    return sent_at
