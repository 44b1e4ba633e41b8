"""Time-varying contacts between devices: records, a plan with snapshots, and the sources.

One module per source: ``plan`` (records, static graphs), ``mobility`` (random waypoint),
``poisson`` (pairwise renewal contacts), ``traces`` (trace files and node-id mapping).
``p2pfed.scenario.contacts`` turns a scenario's ``contacts`` section into a ``ContactPlan``.
"""

from p2pfed.network.contacts.mobility import random_waypoint_contacts, waypoint_positions
from p2pfed.network.contacts.plan import Contact, ContactError, ContactPlan, make_contact, static_contacts
from p2pfed.network.contacts.poisson import poisson_contacts
from p2pfed.network.contacts.traces import FORMATS, TraceContact, map_nodes, read_trace

__all__ = ["Contact", "ContactError", "ContactPlan", "FORMATS", "TraceContact", "make_contact", "map_nodes",
           "poisson_contacts", "random_waypoint_contacts", "read_trace", "static_contacts", "waypoint_positions"]
