"""Checkpoints of an opportunistic (contact) run: what every process waits on, saved and taken up.

A SimPy process is a generator and cannot be saved, but each process of the contact runtime
waits on one thing at a time: a device on its next step, the evaluator on its next evaluation,
the contact process on the next contact, a session (one direction of one contact) on a peer
coming up, on something new to send, or on the end of a transfer it began. ``Waits`` keeps that
description current; a checkpoint is taken when every event due at an evaluation time has been
processed (``OpportunisticSimulation.advance``), and a restored run starts each process again in
the wait it was in, without deciding anything anew (deciding would have side effects: a TTL drop,
a battery check, at another moment than the uninterrupted run).

Bit-identical continuation also needs the order SimPy gives events due at the same time (by
creation) and the order in which waiters were registered on a shared event (a contact's end, a
peer's pulses). The pending timeouts are therefore created again in their original creation
order (read from SimPy's queue) at their exact original times, and the sessions restarted in the
order they began waiting (``Wait.seq``).
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import simpy
import torch

from p2pfed.algorithms.state import received_from_state, received_state
from p2pfed.device import Outgoing
from p2pfed.engine.contact_lines import ContactLines
from p2pfed.engine.delivery import Frame
from p2pfed.engine.run_state import devices_state, load_devices_state

if TYPE_CHECKING:
    from p2pfed.device.exchange import Offer, PartKey, Version
    from p2pfed.engine.opportunistic import OpportunisticSimulation

Pending = list[float | int]   # [time, SimPy's creation id] of a scheduled event


@dataclass(eq=False)
class Wait:
    """What a session waits on: ``down`` (either end offline), ``idle`` (nothing to send),
    ``transfer`` (its ``offer``, begun at ``started``, arriving with ``done`` at ``until``), and with
    the acknowledged protocol ``summary`` (the peer's summary vector) and ``ack`` (the offer's
    acknowledgement on its way back)."""

    kind: str
    offer: Offer | None = None
    started: float = 0.0
    done: simpy.Event | None = None
    seq: int = -1                       # order in which the session began waiting
    until: float = 0.0                  # when ``done`` fires


@dataclass(eq=False)
class Waits:
    """What each process of a contact run waits on now (see the module's docstring)."""

    num_devices: int
    device: list[simpy.Event | None] = field(default_factory=list)
    evaluation: tuple[int, float, simpy.Event] | None = None     # next index, its time, its timeout
    evaluated: int = 0                                            # evaluations done
    contact: tuple[int, simpy.Event] | None = None                # next contact to open, its start
    contact_ends: dict[int, simpy.Event] = field(default_factory=dict)
    sessions: dict[tuple[int, int, int], Wait] = field(default_factory=dict)   # (src, dst, contact)
    churn: dict[int, tuple[int, bool, simpy.Event]] = field(default_factory=dict)   # span, back on?, wake
    recharge: simpy.Event | None = None
    offers_later: dict[simpy.Event, tuple[int, list[Outgoing]]] = field(default_factory=dict)
    counter: Iterator[int] = field(default_factory=itertools.count)
    stop_after: int | None = None                                 # evaluations before a checkpoint
    stop: simpy.Event | None = None

    def __post_init__(self) -> None:
        self.device = [None] * self.num_devices


# -- saving ------------------------------------------------------------------------------------
def contact_run_state(sim: OpportunisticSimulation) -> dict[str, Any]:
    """The run's state at a checkpoint (``advance`` just returned): checkpoint data only."""
    if sim.batches:
        raise RuntimeError("a batch window is open at the checkpoint: evaluation.every_s must be a "
                           "multiple of asynchronous.batch_window_s")
    queue = {id(ev): [float(t), int(eid)] for t, _, eid, ev in sim.env._queue}   # SimPy's event heap

    def pending(ev: simpy.Event) -> Pending:
        return queue[id(ev)]

    w = sim.waits
    assert w.evaluation is not None
    index, t, wake = w.evaluation
    own_ids = [{id(o): k for k, o in enumerate(st.own)} for st in sim.state]
    sessions = []
    for (src, dst, contact), wait in sorted(w.sessions.items(), key=lambda kv: kv[1].seq):
        entry: dict[str, Any] = {"src": src, "dst": dst, "contact": contact, "kind": wait.kind, "seq": wait.seq}
        if wait.done is not None:
            entry.update(started=wait.started, done=pending(wait.done))
        if wait.offer is not None:
            k = own_ids[src].get(id(wait.offer))
            entry.update(offer={"own": k} if k is not None else _offer_state(wait.offer))
        if (src, dst, contact) in sim.peer_have:
            entry.update(peer_have=_have_state(sim.peer_have[src, dst, contact]))
        sessions.append(entry)
    return {
        "time": float(sim.env.now),
        "evaluation": [index, t, pending(wake)],
        "evaluated": w.evaluated,
        "seq": next(w.counter),
        **devices_state(sim.loops, sim.delivery, sim.recorder, sim.rng, sim.energy),
        "counts": [sim.steps_taken, sim.batches_taken],
        "device_wakes": [None if ev is None else pending(ev) for ev in w.device],
        "contact": None if w.contact is None else [w.contact[0], pending(w.contact[1])],
        "contact_ends": [[k, pending(ev)] for k, ev in sorted(w.contact_ends.items())],
        "sessions": sessions,
        "churn": [[i, k, back, pending(ev)] for i, (k, back, ev) in sorted(w.churn.items())],
        "recharge": None if w.recharge is None else pending(w.recharge),
        "lines": sim.lines.state(),
        "control": dict(sim.control),
        "offers_later": [{"device": i, "wake": pending(ev), "outgoing": [_outgoing_state(o) for o in out]}
                         for ev, (i, out) in w.offers_later.items()],
        "state": [{"online": st.online, "offline_s": st.offline_s,
                   "own": [_offer_state(o) for o in st.own],
                   "carried": [{"part": c.part, "item": received_state(c.item)} for c in st.carried.values()],
                   "have": _have_state(st.have)}
                  for st in sim.state],
    }


def _have_state(have: dict[PartKey, Version]) -> list[list[Any]]:
    return [[o, p, r, s] for (o, p), (r, s) in sorted(have.items())]


def _have_from_state(saved: list[list[Any]]) -> dict[PartKey, Version]:
    return {(int(o), str(p)): (int(r), float(s)) for o, p, r, s in saved}


def _bytes_state(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)


def _offer_state(o: Offer) -> dict[str, Any]:
    return {"origin": o.origin, "part": o.part, "round": o.round, "sent_at": o.sent_at,
            "to": -1 if o.to is None else o.to, "frame": _bytes_state(o.frame.data)}


def _outgoing_state(o: Outgoing) -> dict[str, Any]:
    return {"part": o.part, "round": o.round, "sent_at": o.sent_at, "data": _bytes_state(o.data),
            "to": -1 if o.to is None else o.to, "origin": -1 if o.origin is None else o.origin}


# -- taking up ---------------------------------------------------------------------------------
def restore_contact_run(sim: OpportunisticSimulation, state: dict[str, Any]) -> None:
    """Continue a run saved by ``contact_run_state`` on a simulation built from the same
    scenario and not started: state back in place, every process in the wait it was in."""
    from p2pfed.device.exchange import Carried

    now = float(state["time"])
    sim.env = env = simpy.Environment(initial_time=now)
    n = len(sim.algorithms)
    sim.news = [env.event() for _ in range(n)]
    sim.switched = [env.event() for _ in range(n)]
    sim.went_offline = [env.event() for _ in range(n)]
    load_devices_state(state, sim.loops, sim.delivery, sim.recorder, sim.rng, sim.energy)
    sim.steps_taken, sim.batches_taken = (int(x) for x in state["counts"])
    interned = sim.algorithms[0].ctx.shared.setdefault("checkpoint/payloads", weakref.WeakValueDictionary()) \
        if sim.algorithms else {}
    for st, saved in zip(sim.state, state["state"], strict=True):
        st.online, st.offline_s = bool(saved["online"]), float(saved["offline_s"])
        st.own = [_offer_from_state(o) for o in saved["own"]]
        st.carried = {}
        for c in saved["carried"]:
            item = received_from_state(c["item"], interned)
            st.carried[item.sender, c["part"]] = Carried(item, c["part"])
        st.have = _have_from_state(saved["have"])

    # the pending timeouts again, in their original creation order, at their original times
    made: dict[int, simpy.Event] = {}
    for t, eid in sorted(_all_pending(state), key=lambda p: p[1]):
        made[int(eid)] = _timeout_at(env, float(t))

    def ev(p: Pending) -> simpy.Event:
        return made[int(p[1])]

    sim.lines = ContactLines.from_state(state.get("lines", []))
    sim.control = {k: int(v) for k, v in state.get("control", sim.control).items()}
    w = sim.waits = Waits(n)
    w.counter = itertools.count(int(state["seq"]))
    w.evaluated = int(state["evaluated"])
    index, t, wake = state["evaluation"]
    sim.evaluator = env.process(sim._evaluator(int(index), float(t), ev(wake)))
    for i, p in enumerate(state["device_wakes"]):
        if p is not None:
            env.process(sim._device(i, ev(p)))
    if state["contact"] is not None:
        env.process(sim._contacts(int(state["contact"][0]), ev(state["contact"][1])))
    spans = sim.churn_spans()
    for i, k, back, p in state["churn"]:
        env.process(sim._churn(int(i), spans[int(i)], int(k), bool(back), ev(p)))
    if state["recharge"] is not None:
        env.process(sim._recharges(ev(state["recharge"])))
    for later in state["offers_later"]:
        outgoing = [_outgoing_from_state(o) for o in later["outgoing"]]
        env.process(sim._offer_later(int(later["device"]), outgoing, 0.0, ev(later["wake"])))
    ends = {int(k): ev(p) for k, p in state["contact_ends"]}
    for k, end in ends.items():
        sim._track_end(k, end)
    for s in state["sessions"]:   # in the order they began waiting: they register on shared events alike
        src, dst = int(s["src"]), int(s["dst"])
        wait = Wait(s["kind"], seq=int(s["seq"]))
        if "done" in s:
            wait.started, wait.done, wait.until = float(s["started"]), ev(s["done"]), float(s["done"][0])
        if "offer" in s:
            o = s["offer"]
            wait.offer = sim.state[src].own[int(o["own"])] if "own" in o else _offer_from_state(o)
        if "peer_have" in s:
            sim.peer_have[src, dst, int(s["contact"])] = _have_from_state(s["peer_have"])
        env.process(sim._session(src, dst, int(s["contact"]), ends[int(s["contact"])], wait))


def _all_pending(state: dict[str, Any]) -> Iterator[Pending]:
    yield state["evaluation"][2]
    yield from (p for p in state["device_wakes"] if p is not None)
    if state["contact"] is not None:
        yield state["contact"][1]
    yield from (p for _, p in state["contact_ends"])
    yield from (s["done"] for s in state["sessions"] if "done" in s)
    yield from (c[3] for c in state["churn"])
    if state["recharge"] is not None:
        yield state["recharge"]
    yield from (later["wake"] for later in state["offers_later"])


def _timeout_at(env: simpy.Environment, t: float) -> simpy.Event:
    """A timeout due at exactly ``t``: SimPy adds the delay to ``now``, which may round, so the
    delay is nudged by ulps until the sum is ``t`` (the sum is monotone in the delay)."""
    delay = t - float(env.now)
    while float(env.now) + delay < t:
        delay = math.nextafter(delay, math.inf)
    while float(env.now) + delay > t:
        delay = math.nextafter(delay, -math.inf)
    return env.timeout(max(delay, 0.0))


def _offer_from_state(o: dict[str, Any]) -> Offer:
    from p2pfed.device.exchange import Offer

    return Offer(int(o["origin"]), str(o["part"]), int(o["round"]), float(o["sent_at"]),
                      Frame(o["frame"].numpy().tobytes()), None if o["to"] < 0 else int(o["to"]))


def _outgoing_from_state(o: dict[str, Any]) -> Outgoing:
    return Outgoing(str(o["part"]), int(o["round"]), float(o["sent_at"]), o["data"].numpy().tobytes(),
                    None if o["to"] < 0 else int(o["to"]), None if o["origin"] < 0 else int(o["origin"]))
