"""Contacts over time: the record every contact source produces, and the plan that holds them.

A contact says that two devices can exchange bytes during ``[start, end)`` at a given link
speed. A static graph is just a source whose contacts never end; mobility models and traces
give contacts that come and go. The plan answers "who is in contact at time t" as a networkx
graph, for plots and for algorithms that want their current neighbours.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import networkx as nx
import numpy as np


class ContactError(ValueError):
    """A contact source that cannot be built or read (names the file, line or field at fault)."""


@dataclass(frozen=True, order=True)
class Contact:
    """Devices ``a < b`` can exchange bytes during ``[start, end)`` seconds of simulated time."""

    start: float
    end: float
    a: int
    b: int
    bandwidth_bps: float
    latency_s: float

    @property
    def duration(self) -> float:
        return self.end - self.start


def make_contact(a: int, b: int, start: float, end: float, bandwidth_bps: float,
                 latency_s: float) -> Contact:
    """A contact with its ends ordered (contacts are undirected) and its fields checked."""
    if a == b:
        raise ContactError(f"a contact needs two distinct devices, got {a} twice")
    if not end > start:
        raise ContactError(f"contact {a}-{b} ends at {end} before it starts at {start}")
    return Contact(float(start), float(end), min(a, b), max(a, b), float(bandwidth_bps), float(latency_s))


class ContactPlan:
    """Every contact of a run, sorted by start time, with snapshots at any simulated time."""

    def __init__(self, num_devices: int, contacts: Iterable[Contact]) -> None:
        self.num_devices = num_devices
        self.contacts = sorted(contacts)
        for c in self.contacts:
            if not 0 <= c.a < num_devices or not 0 <= c.b < num_devices:
                raise ContactError(f"contact {c.a}-{c.b} names a device outside 0..{num_devices - 1}")
        self._starts = np.array([c.start for c in self.contacts], dtype=float)
        self._ends = np.array([c.end for c in self.contacts], dtype=float)

    def __len__(self) -> int:
        return len(self.contacts)

    def snapshot(self, t: float) -> nx.Graph:
        """The contact graph at time ``t``: an edge for every contact with start <= t < end."""
        g = nx.Graph()
        g.add_nodes_from(range(self.num_devices))
        live = np.flatnonzero((self._starts <= t) & (self._ends > t))
        for k in live:
            c = self.contacts[k]
            g.add_edge(c.a, c.b, bandwidth_bps=c.bandwidth_bps, latency_s=c.latency_s, end=c.end)
        return g

    def neighbours(self, device: int, t: float) -> list[int]:
        return sorted(self.snapshot(t).neighbors(device))

    def stats(self, horizon: float) -> dict[str, float]:
        """Counts worth reporting: contacts, mean duration (within the horizon), per-device rate."""
        durations = np.minimum(self._ends, horizon) - self._starts
        durations = durations[durations > 0]
        finite = durations[np.isfinite(durations)]
        return {
            "contacts": int(durations.size),
            "mean_contact_s": float(finite.mean()) if finite.size else 0.0,
            "contacts_per_device_per_hour": float(2 * durations.size / max(self.num_devices, 1)
                                                  / max(horizon / 3600.0, 1e-12)),
        }


def static_contacts(graph: nx.Graph) -> list[Contact]:
    """A static graph as contacts that never end (its edges' bandwidth and latency kept)."""
    return [make_contact(u, v, 0.0, math.inf, d["bandwidth_bps"], d["latency_s"])
            for u, v, d in graph.edges(data=True)]
