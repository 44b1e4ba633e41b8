"""How a device takes a message in: the one place that checks, caches and counts what arrives.

Every runtime hands the bytes that reached a device to ``Intake.take``, with the peer the link
says they came from. The checks run in one order, the first failure drops the message with a
reason (counted and logged by the Recorder), and only a message that passes them all reaches the
algorithm's cache:

1. not from a peer this device ignores (too many bad messages);
2. decodes: size, dtypes, shapes, finite values (the wire codec, never unpickled);
3. the sender it claims is the peer of the link it came over, and a neighbour;
4. within the run's window: not from a round past the last, not older than the TTL;
5. the method's message kind;
6. relay rules: a carried artifact names another device as its origin, within the hop limit;
   with ``keyring`` set, the artifact carries its origin's signature (``bad-signature`` if not:
   a copy claiming an origin whose key did not sign it is never cached);
   tensors sent at a reduced wire precision are restored (their record checked);
7. the method's own check against the local model (``check``, through ``Algorithm.receive``).

A peer whose messages fail more than ``max_bad_messages`` times is ignored from then on.

With ``hold_later_rounds`` (real peers in synchronous rounds) a message that passed checks 1–3
but comes from a round after the receiver's current one (a faster neighbour already sharing its
next round) is held, undecoded, and taken in by ``release`` when the receiver reaches that round:
a device fuses in round r what its neighbours shared up to round r−1, as in the simulator,
whatever the wall-clock skew between peers. Under the same rule a repeat of a round already
received from that sender (a restarted peer sending its round again) is refused as ``repeat``,
so an artifact is never fused twice; nothing is missing then, so it is counted apart from the
drops (``messages_repeated``). Under that rule too, a neighbour's resend request (kind
``peer/resend``, sent by a peer restarted from its checkpoint) that passed checks 1–3 is returned as
``ResendRequest`` for the runtime to answer; it never reaches the algorithm. Likewise a real
peer's contact-protocol message (``control_kinds``: a summary vector, an acknowledgement) is
returned as ``Control`` once it passed checks 1–3.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from p2pfed.algorithms import Algorithm, ArtifactError, Payload, Received
from p2pfed.device.wire import RELAY_KEY, RESEND_KIND, SIGNED_DIGEST_MEMO
from p2pfed.results.recorder import Recorder
from p2pfed.transport import CodecError, Message, decode
from p2pfed.transport.precision import PRECISION_KEY, restore_precision
from p2pfed.transport.signing import SIGNATURE_KEY, Keyring, Signed

log = logging.getLogger("p2pfed.device")
_RESTORED = ("p2pfed/intake", "restored-tensors")   # memo key of a message's tensors at full precision
_VERIFIED = "p2pfed/intake/signature"                # memo key (with the origin) of a signature's check


@dataclass(frozen=True)
class IntakeRules:
    """What a device accepts; the runtime sets them from the scenario (and the peer file)."""

    max_message_bytes: int
    rounds: int | None = None            # messages from this round on are past the run
    max_age_s: float | None = None       # artifacts older than this on arrival are stale
    hop_limit: int = 1                   # above 1, carried artifacts are accepted up to this many links
    num_devices: int | None = None       # relay origins must be ids below this (None: any id)
    max_bad_messages: int | None = None  # a peer failing more often is ignored (None: never)
    contain_errors: bool = False         # an unexpected error in a check drops instead of raising
    hold_later_rounds: bool = False      # synchronous real peers: hold later rounds, refuse repeats,
                                         # pass resend requests up (above)
    control_kinds: frozenset[str] = frozenset()   # real peers over contacts: returned as ``Control``
    keyring: Keyring | None = None       # artifacts must carry their origin's signature (None: not checked)


@dataclass(frozen=True)
class Held:
    """A checked message from a later round, kept until the receiver reaches it."""

    sender: int
    round: int


@dataclass(frozen=True)
class ResendRequest:
    """A restarted neighbour asks for what this device shared from ``from_round`` on."""

    sender: int
    from_round: int


@dataclass(frozen=True)
class Control:
    """A contact-protocol message (``IntakeRules.control_kinds``) that passed checks 1–3, for the
    runtime to answer (its ``meta`` is the runtime's to check)."""

    sender: int
    kind: str
    meta: dict[str, Any]


class Refused(Exception):
    """A failed intake check: the drop reason and what was wrong."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class Intake:
    """One device's intake; ``take`` returns the cached item, or None when it was dropped."""

    def __init__(self, device: int, algorithm: Algorithm, recorder: Recorder, rules: IntakeRules, *,
                 is_neighbour: Callable[[int], bool] | None = None,
                 on_ignore: Callable[[int], None] | None = None) -> None:
        """``is_neighbour``: whether a peer is this device's neighbour (None: every link is
        between neighbours, as in simulation); ``on_ignore``: called once for a peer that is
        ignored from now on (a real peer disconnects it)."""
        self.device = device
        self.algorithm = algorithm
        self.recorder = recorder
        self.rules = rules
        self.is_neighbour = is_neighbour
        self.on_ignore = on_ignore
        self.bad: Counter[int] = Counter()   # failures per (authenticated or claimed) peer id
        self.ignored: set[int] = set()
        self.held: list[tuple[int, int | None, bytes]] = []   # (round, link, frame) of later rounds

    def take(self, data: bytes, *, link: int | None, now: float, round: int,
             decoded: Message | None = None, memo: dict[Any, Any] | None = None, arrival: bool = True
             ) -> Received | Held | ResendRequest | Control | None:
        """Check ``data`` that came over the link from peer ``link`` (None: unauthenticated, the
        claimed sender is the best attribution there is) and cache it; ``round``: the receiver's
        current round (or evaluation interval), the one a drop is counted in. ``decoded``: ``data``
        already decoded by the codec (a broadcast decoded once for all its receivers, read-only),
        with ``memo`` the work methods derive from it, shared the same way (``Payload.memo``);
        the other checks still run here. Returns the cached item, ``Held`` for a later round's
        message, ``ResendRequest`` (see ``hold_later_rounds``) or ``Control`` (``control_kinds``),
        None if dropped. ``arrival``: ``data`` just arrived (False: a held frame taken in later, its
        delivery time already counted)."""
        who = link
        try:
            if who is not None and who in self.ignored:
                raise Refused("ignored", "")
            try:
                msg = decoded if decoded is not None else decode(data, max_bytes=self.rules.max_message_bytes)
            except CodecError as exc:
                raise Refused(f"codec:{exc.reason}", str(exc)) from None
            if who is None and self.is_neighbour is not None and self.is_neighbour(msg.sender):
                who = msg.sender
                if who in self.ignored:
                    raise Refused("ignored", "")
            if who is not None and msg.sender != who:
                raise Refused("identity", f"claims to be peer {msg.sender} but came from peer {who}")
            if self.is_neighbour is not None and not self.is_neighbour(msg.sender):
                raise Refused("identity", f"claims to be peer {msg.sender}, not a neighbour")
            if msg.kind in self.rules.control_kinds:
                return Control(msg.sender, msg.kind, dict(msg.meta))
            if arrival and RELAY_KEY not in msg.meta:   # a carried copy's sent_at is its origin's
                self.recorder.arrived(now - msg.sent_at, msg.sender, self.device)
            if self.rules.hold_later_rounds and msg.kind == RESEND_KIND:
                return ResendRequest(msg.sender, msg.round)
            past_run = self.rules.rounds is not None and msg.round >= self.rules.rounds
            if self.rules.hold_later_rounds and msg.round > round and not past_run:
                self.held.append((msg.round, link, bytes(data)))
                return Held(msg.sender, msg.round)
            if self.rules.hold_later_rounds:
                cached = self.algorithm.cache.get(msg.sender)
                if cached is not None and msg.round <= cached.round:
                    raise Refused("repeat", f"round {msg.round} from peer {msg.sender} was already received")
            item = self._check(msg, now, memo)
        except Refused as exc:
            self._drop(who, round, exc.reason, str(exc))
            return None
        except Exception as exc:
            if not self.rules.contain_errors:
                raise
            log.exception("peer %d: unexpected error on a message", self.device)
            self._drop(who, round, "internal", f"{type(exc).__name__}: {exc}")
            return None
        self.recorder.delivered(self.device, len(data))
        return item

    def release(self, up_to_round: int, now: float) -> list[Received]:
        """Take in the held messages of rounds up to ``up_to_round``; those still later stay held."""
        due = [h for h in self.held if h[0] <= up_to_round]
        self.held = [h for h in self.held if h[0] > up_to_round]
        taken = [self.take(data, link=link, now=now, round=up_to_round, arrival=False) for _, link, data in due]
        return [item for item in taken if isinstance(item, Received)]

    def refuse(self, link: int | None, round: int, reason: str, detail: str = "") -> None:
        """Count a frame the transport refused before it could be decoded (oversized, multipart)."""
        self._drop(link, round, reason, detail)

    def _check(self, msg: Any, now: float, memo: dict[Any, Any] | None = None) -> Received:
        rules = self.rules
        if rules.rounds is not None and msg.round >= rules.rounds:
            raise Refused("window", f"round {msg.round} is past the run's {rules.rounds} rounds")
        if rules.max_age_s is not None and now - msg.sent_at > rules.max_age_s:
            raise Refused("window", f"artifact is {now - msg.sent_at:.1f} s old, over the TTL of "
                                    f"{rules.max_age_s:g} s")
        if msg.kind != self.algorithm.kind():
            raise Refused("artifact", f"kind {msg.kind!r}, expected {self.algorithm.kind()!r}")
        meta = dict(msg.meta)
        memo = {} if memo is None else memo
        try:
            origin, hops = self._route(meta.pop(RELAY_KEY, None), msg.sender)
            signed = self._signed(msg, origin, meta, memo)
            record = meta.pop(PRECISION_KEY, None)
            if _RESTORED not in memo:   # a broadcast's receivers restore its tensors once (memo is shared)
                try:
                    memo[_RESTORED] = restore_precision(record, dict(msg.tensors))
                except CodecError as exc:
                    raise Refused(f"codec:{exc.reason}", str(exc)) from None
            tensors = memo[_RESTORED]
            item = Received(sender=origin, round=msg.round, sent_at=msg.sent_at, received_at=now,
                            payload=Payload(meta, dict(tensors), memo), hops=hops, signed=signed)
            self.algorithm.receive(item)
        except ArtifactError as exc:
            raise Refused("artifact", str(exc)) from None
        return item

    def _signed(self, msg: Message, origin: int, meta: dict[str, Any], memo: dict[Any, Any]) -> Signed | None:
        """The artifact as ``origin`` signed it (``meta``: without the relay record; the signature
        is popped from it); None when signatures are not checked."""
        signature = meta.pop(SIGNATURE_KEY, None)
        keyring = self.rules.keyring
        if keyring is None:
            return None
        key = (_VERIFIED, origin)   # a broadcast's receivers check its signature once (memo is shared)
        if key not in memo:
            memo[key] = keyring.problem(signature, msg.kind, origin, msg.round, msg.sent_at, meta, msg.tensors,
                                        digest=memo.get((SIGNED_DIGEST_MEMO, origin)))
        if memo[key] is not None:
            raise Refused("bad-signature", memo[key])
        return Signed(signature, dict(meta), dict(msg.tensors))

    def _route(self, relay: Any, src: int) -> tuple[int, int]:
        """The artifact's origin and the links it travelled."""
        if relay is None:
            return src, 1
        limit, n = self.rules.hop_limit, self.rules.num_devices
        if limit <= 1:
            raise ArtifactError("carries a relayed artifact but forwarding is off")
        origin, hops = (relay.get("origin"), relay.get("hops")) if isinstance(relay, dict) else (None, None)
        if (not isinstance(origin, int) or isinstance(origin, bool) or origin < 0
                or (n is not None and origin >= n) or origin in (src, self.device)):
            raise ArtifactError(f"meta 'relay.origin' must be another peer id, got {origin!r}")
        if not isinstance(hops, int) or isinstance(hops, bool) or not 2 <= hops <= limit:
            raise ArtifactError(f"meta 'relay.hops' must be in 2..{limit}, got {hops!r}")
        return origin, hops

    def _drop(self, who: int | None, round: int, reason: str, detail: str) -> None:
        if reason == "repeat":   # a copy of what is here already (a restart's re-sent frames): nothing lost
            self.recorder.repeated(self.device, who, detail)
        else:
            self.recorder.dropped(who, self.device, round, reason, detail)
        limit = self.rules.max_bad_messages
        if who is None or reason == "ignored" or limit is None:
            return
        self.bad[who] += 1
        if self.bad[who] > limit and who not in self.ignored:
            self.ignored.add(who)
            log.error("peer %d disconnects peer %d after %d bad messages; it is ignored from now on",
                      self.device, who, self.bad[who])
            if self.on_ignore is not None:
                self.on_ignore(who)

    # -- state (a real peer's checkpoint) ------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        # Held frames as byte tensors: a checkpoint loads with torch's weights-only reader.
        held = [{"round": r, "link": -1 if link is None else link,
                 "frame": torch.frombuffer(bytearray(data), dtype=torch.uint8)} for r, link, data in self.held]
        return {"bad": {str(k): v for k, v in self.bad.items()}, "ignored": sorted(self.ignored), "held": held}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.bad = Counter({int(k): v for k, v in state["bad"].items()})
        self.ignored = set(state["ignored"])
        self.held = [(int(h["round"]), None if h["link"] < 0 else int(h["link"]), h["frame"].numpy().tobytes())
                     for h in state.get("held", [])]
