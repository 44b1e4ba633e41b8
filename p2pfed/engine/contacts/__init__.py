"""Time-varying contacts between devices: records, a plan with snapshots, and the sources.

One module per source: ``plan`` (records, static graphs), ``mobility`` (random waypoint),
``poisson`` (pairwise renewal contacts), ``traces`` (trace files and node-id mapping).
``build`` turns a scenario's ``contacts`` section into a ``ContactPlan``.
"""

from p2pfed.engine.contacts.build import build_contact_plan
from p2pfed.engine.contacts.mobility import random_waypoint_contacts, waypoint_positions
from p2pfed.engine.contacts.plan import Contact, ContactError, ContactPlan, make_contact, static_contacts
from p2pfed.engine.contacts.poisson import poisson_contacts
from p2pfed.engine.contacts.traces import FORMATS, TraceContact, map_nodes, read_trace

__all__ = ["Contact", "ContactError", "ContactPlan", "FORMATS", "TraceContact", "build_contact_plan",
           "make_contact", "map_nodes", "poisson_contacts", "random_waypoint_contacts", "read_trace",
           "static_contacts", "waypoint_positions"]
