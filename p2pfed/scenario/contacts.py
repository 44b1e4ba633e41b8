"""A scenario's ``contacts`` section → a ``ContactPlan`` and the simulated horizon."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, cast

import networkx as nx
import numpy as np

from p2pfed.network.contacts.mobility import random_waypoint_contacts
from p2pfed.network.contacts.plan import Contact, ContactError, ContactPlan, make_contact, static_contacts
from p2pfed.network.contacts.poisson import poisson_contacts
from p2pfed.network.contacts.traces import TraceContact, map_nodes, read_trace

if TYPE_CHECKING:
    from p2pfed.scenario.schema import ContactsSection

DEFAULT_DURATION_S = 3600.0


class Contacts(NamedTuple):
    """A run's contacts and how long it runs: the simulator and each real peer draw the same."""

    plan: ContactPlan
    duration_s: float


def build_contact_plan(section: ContactsSection, num_devices: int, *, seed: int, graph: nx.Graph | None = None,
                       file: Path | None = None) -> Contacts:
    """Build the contacts the section asks for, drawn from ``seed``; ``graph``: the topology
    (``kind: static``), ``file``: the trace, resolved."""
    s = section
    rng = np.random.default_rng(seed)
    duration = s.duration_s
    if s.kind == "static":
        if graph is None:
            raise ContactError("contacts.kind 'static' needs the topology graph")
        return Contacts(ContactPlan(num_devices, static_contacts(graph)), duration or DEFAULT_DURATION_S)
    if s.kind == "random-waypoint":
        duration = duration or DEFAULT_DURATION_S
        contacts = random_waypoint_contacts(num_devices, duration,
                                            area_m=cast("tuple[float, float]", tuple(s.area_m)),
                                            speed_mps=cast("tuple[float, float]", tuple(s.speed_mps)),
                                            pause_s=cast("tuple[float, float]", tuple(s.pause_s)),
                                            range_m=s.range_m, step_s=s.step_s,
                                            bandwidth_bps=s.bandwidth_bps, latency_s=s.latency_s, rng=rng)
        return Contacts(ContactPlan(num_devices, contacts), duration)
    if s.kind == "poisson":
        duration = duration or DEFAULT_DURATION_S
        contacts = poisson_contacts(num_devices, duration, mean_intercontact_s=s.mean_intercontact_s,
                                    mean_duration_s=s.mean_duration_s, intercontact=s.intercontact,
                                    alpha=s.power_law_alpha, bandwidth_bps=s.bandwidth_bps,
                                    latency_s=s.latency_s, rng=rng)
        return Contacts(ContactPlan(num_devices, contacts), duration)
    if s.kind == "trace":
        if file is None or s.format is None:
            raise ContactError("contacts.file and contacts.format are required when contacts.kind is 'trace'")
        raw = read_trace(file, s.format, window_s=s.window_s)
        contacts, horizon = trace_contacts(raw, s, num_devices, str(file))
        return Contacts(ContactPlan(num_devices, contacts), horizon)
    raise ContactError(f"contacts.kind {s.kind!r} has no contact source")


def partners(plan: ContactPlan, duration: float) -> list[list[int]]:
    """Whom each device meets at least once within the run: its neighbours as a real peer."""
    met: list[set[int]] = [set() for _ in range(plan.num_devices)]
    for c in plan.contacts:
        if c.start < duration:
            met[c.a].add(c.b)
            met[c.b].add(c.a)
    return [sorted(m) for m in met]


def trace_contacts(raw: list[TraceContact], section: ContactsSection, num_devices: int, source: str
                   ) -> tuple[list[Contact], float]:
    """The trace's contacts between the scenario's devices within the run's window, and the
    window's length. A trace none of whose contacts qualifies (``contacts.nodes`` naming ids the
    file never mentions, a ``start_s`` past its end) would run to complete-looking results in which
    no device ever met another: refused, unless ``contacts.allow_no_contacts``."""
    s = section
    if not raw:
        raise ContactError(f"{source}: the trace holds no contacts")
    ids = map_nodes(raw, num_devices, s.nodes, allow_mismatch=s.allow_node_mismatch, source=source)
    t0 = min(c.start for c in raw) if s.start_s is None else s.start_s
    horizon = s.duration_s or (max(c.end for c in raw) - t0)
    contacts = [make_contact(ids[c.a], ids[c.b], max(c.start - t0, 0.0), min(c.end - t0, horizon),
                             s.bandwidth_bps, s.latency_s)
                for c in raw if c.a in ids and c.b in ids and c.end - t0 > 0 and c.start - t0 < horizon]
    if not contacts and not s.allow_no_contacts:
        mapped = sorted(ids, key=lambda x: ids[x])
        shown = ", ".join(mapped[:10]) + (f" and {len(mapped) - 10} more" if len(mapped) > 10 else "")
        raise ContactError(
            f"{source}: none of its {len(raw)} contacts is between two of the scenario's {num_devices} devices "
            f"within the run's window (trace ids used as devices: {shown or 'none'}); check contacts.nodes and "
            "contacts.start_s, or set contacts.allow_no_contacts: true")
    return contacts, horizon
