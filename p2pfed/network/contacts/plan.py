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


_ORDER = ("start", "end", "a", "b", "bandwidth_bps", "latency_s")  # Contact's field order
_FLOAT_FIELDS = {"start", "end", "bandwidth_bps", "latency_s"}


class ContactPlan:
    """Every contact of a run, sorted by start time, with snapshots at any simulated time."""

    def __init__(self, num_devices: int, contacts: Iterable[Contact]) -> None:
        self.num_devices = num_devices
        given = list(contacts)
        fields = [np.array([getattr(c, f) for c in given], dtype=float if f in _FLOAT_FIELDS else np.int64)
                  for f in _ORDER]
        # the dataclass order (start, end, a, b, bandwidth, latency), stable like sorted(), but
        # by np.lexsort: sorting millions of contacts with Python comparisons took ~30 s
        order = np.lexsort(fields[::-1]) if given else np.empty(0, dtype=np.intp)
        self.contacts = [given[i] for i in order.tolist()]
        start, end, a, b = (f[order] for f in fields[:4])
        outside = np.flatnonzero((a < 0) | (a >= num_devices) | (b < 0) | (b >= num_devices))
        if outside.size:
            c = self.contacts[outside[0]]
            raise ContactError(f"contact {c.a}-{c.b} names a device outside 0..{num_devices - 1}")
        self._starts, self._ends, self._a, self._b = start, end, a, b
        self._by_device: list[np.ndarray] | None = None

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
        """Devices in contact with ``device`` at time ``t`` (the snapshot's neighbours, without
        building the snapshot: only ``device``'s own contacts are looked at)."""
        if self._by_device is None:
            ends = np.concatenate([self._a, self._b])
            index = np.concatenate([np.arange(len(self))] * 2)
            order = np.argsort(ends, kind="stable")
            bounds = np.searchsorted(ends[order], np.arange(self.num_devices + 1))
            self._by_device = [index[order[bounds[i]:bounds[i + 1]]] for i in range(self.num_devices)]
        mine = self._by_device[device]
        live = mine[(self._starts[mine] <= t) & (self._ends[mine] > t)]
        others = np.where(self._a[live] == device, self._b[live], self._a[live])
        return sorted(set(others.tolist()))

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
