"""The links of open contacts as real peers use them (``contacts.protocol: acknowledged``).

A real peer sends everything for one peer down one TCP connection, in order: its summary vector,
its transfers and its acknowledgements of the other side's transfers. So an acknowledgement
waits behind a transfer already on its way (head-of-line blocking), and a transfer's sender
knows it arrived only a latency later. ``ContactLines`` keeps, for each direction of each open
contact, the moment its link is free again; a message sent at ``now`` leaves when the link is
free, takes its ``wire_bytes`` at the contact's bandwidth, and arrives a latency later.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from p2pfed.device.contact_protocol import wire_bytes
from p2pfed.network.contacts import Contact

Direction = tuple[int, int, int]   # (sender, receiver, contact index)


@dataclass
class ContactLines:
    """When each direction of each open contact is free again (simulated seconds)."""

    free_at: dict[Direction, float] = field(default_factory=dict)

    def send(self, direction: Direction, contact: Contact, now: float, encoded: int) -> float:
        """Queue a message of ``encoded`` bytes on ``direction`` at ``now``; when it arrives."""
        leaves = max(now, self.free_at.get(direction, now))
        done = leaves + 8.0 * wire_bytes(encoded) / contact.bandwidth_bps
        self.free_at[direction] = done
        return done + contact.latency_s

    def close(self, index: int) -> None:
        """Contact ``index`` ended: its links are gone (with anything still queued on them)."""
        for direction in [d for d in self.free_at if d[2] == index]:
            del self.free_at[direction]

    def state(self) -> list[list[float]]:
        return [[s, d, k, t] for (s, d, k), t in sorted(self.free_at.items())]

    @classmethod
    def from_state(cls, saved: list[list[float]]) -> ContactLines:
        return cls({(int(s), int(d), int(k)): float(t) for s, d, k, t in saved})
