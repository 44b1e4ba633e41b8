"""Faults injected into an emulated launch (``p2pfed launch --network emulated --faults FILE``).

A faults file says what goes wrong, and when, in rounds::

    slow:                       # a link much slower than the topology says, from the start
      - {link: [0, 1], factor: 100}          # 100x the latency, 1/100 the bandwidth
    partitions:                 # links between the groups cut, then healed
      - {groups: [[0, 1], [2, 3]], from_round: 2, to_round: 4}
    kill:                       # a peer killed (SIGKILL) and never restarted
      - {peer: 3, after_round: 1}
    clocks:                     # a peer whose host's clock is off, from the start
      - {peer: 2, offset_s: -2.0}            # 2 s behind the others

Rounds are watched through each peer's ``progress.json`` (rounds done, written after each round):
a peer is killed once it has done ``after_round`` rounds; a partition starts once every running
peer has done ``from_round`` rounds and heals once every running peer has done ``to_round``, so
that every peer lives through rounds ``from_round`` to ``to_round - 1`` cut off, however far
apart the peers are. What happened, and when, is in ``summary.json`` ``runtime.faults``.

The emulated hosts share the kernel's one clock, so a skewed clock is applied inside the peer:
``skew_clocks`` writes the offset into the peer file of its bundle folder (``clock_offset_s``),
and the peer reads every time of day through it, as a host whose clock is off would.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from p2pfed.network.lan import EmulatedLan
from p2pfed.network.linkemu import LinkModel
from p2pfed.scenario.errors import ScenarioError
from p2pfed.textfile import read_text
from p2pfed.yamltext import load_yaml


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SlowLink(_Section):
    link: tuple[int, int] = Field(description="The two peers the link joins (it must be a topology edge).")
    factor: float = Field(gt=0, description=(
        "The link at this many times its latency and 1/factor its bandwidth, from the start."))


class Partition(_Section):
    groups: list[list[int]] = Field(min_length=2, description=(
        "The peers on each side (disjoint, at least two groups); every link between two groups is cut."))
    from_round: int = Field(ge=0, description="Cut once every running peer has done this many rounds.")
    to_round: int = Field(gt=0, description=(
        "Healed once every running peer has done this many rounds (above `from_round`)."))

    @model_validator(mode="after")
    def _ordered_and_disjoint(self) -> Partition:
        if self.to_round <= self.from_round:
            raise ValueError(f"to_round {self.to_round} must come after from_round {self.from_round}")
        members = [p for g in self.groups for p in g]
        if len(members) != len(set(members)):
            raise ValueError("a peer is in two groups")
        return self


class Kill(_Section):
    peer: int = Field(ge=0, description="The peer killed (SIGKILL), never restarted; it is left out of the results.")
    after_round: int = Field(ge=0, description="Killed once it has done this many rounds (0: at once).")


class ClockOffset(_Section):
    peer: int = Field(ge=0, description="The peer whose clock is off.")
    offset_s: float = Field(description=(
        "Seconds its clock reads ahead of the others' (negative: behind); it starts, paces its rounds and stamps "
        "its messages by it."))


class Faults(_Section):
    slow: list[SlowLink] = Field(default=[], description="Slow links.")
    partitions: list[Partition] = Field(default=[], description="Network partitions, each for a span of rounds.")
    kill: list[Kill] = Field(default=[], description="Peers killed.")
    clocks: list[ClockOffset] = Field(default=[], description="Peers whose clock is off (one entry per peer).")

    @field_validator("clocks")
    @classmethod
    def _one_offset_per_peer(cls, v: list[ClockOffset]) -> list[ClockOffset]:
        skewed = [c.peer for c in v]
        if len(skewed) != len(set(skewed)):
            raise ValueError(f"a peer is given two offsets (peers {skewed})")
        return v

    def peers(self) -> set[int]:
        return ({p for s in self.slow for p in s.link} | {p for x in self.partitions for g in x.groups for p in g}
                | {k.peer for k in self.kill} | {c.peer for c in self.clocks})

    def shape(self, links: dict[tuple[int, int], LinkModel], source: str) -> dict[tuple[int, int], LinkModel]:
        """The links with the slow ones slowed (both directions); a slow link must exist."""
        out = dict(links)
        for i, s in enumerate(self.slow):
            a, b = s.link
            if (a, b) not in out:
                raise ScenarioError([f"{source}: slow.{i}.link: peers {a} and {b} are not neighbours in the topology"])
            for key in ((a, b), (b, a)):
                m = out[key]
                out[key] = LinkModel(m.latency_s * s.factor, m.bandwidth_bps / s.factor, m.loss, m.jitter_s)
        return out


def skew_clocks(faults: Faults, bundle: Path) -> None:
    """Give each skewed peer of a planned bundle its clock offset (its folder's ``peer.yaml``)."""
    for c in faults.clocks:
        path = bundle / f"peer-{c.peer}" / "peer.yaml"
        config = load_yaml(read_text(path, "peer config", ScenarioError))
        path.write_text(yaml.safe_dump({**config, "clock_offset_s": c.offset_s}, sort_keys=False))


def load_faults(path: Path, peers: int) -> Faults:
    """The faults file, checked; ScenarioError with one 'file: field: problem' line per problem."""
    try:
        raw = load_yaml(read_text(path, "faults file", ScenarioError)) or {}
    except yaml.YAMLError as exc:
        raise ScenarioError([f"{path}: not YAML: {exc}"]) from None
    try:
        faults = Faults.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError([f"{path}: {'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}"
                             for e in exc.errors()]) from None
    unknown = sorted(p for p in faults.peers() if p >= peers)
    if unknown:
        raise ScenarioError([f"{path}: names peers {unknown}; the scenario has peers 0..{peers - 1}"])
    return faults


@dataclass
class FaultDriver:
    """Applies the faults as the peers' progress reaches them; ``events`` says what was done when."""

    faults: Faults
    lan: EmulatedLan
    procs: list[subprocess.Popen]
    progress: list[Path]
    started: float = field(default_factory=time.monotonic)
    events: list[dict[str, Any]] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)
    _partition_state: dict[int, str] = field(default_factory=dict)   # index -> "cut" | "healed"

    def rounds_done(self) -> list[int]:
        done = []
        for f in self.progress:
            try:
                done.append(int(json.loads(f.read_text())["rounds_done"]))
            except (OSError, ValueError, KeyError):
                done.append(0)
        return done

    def _event(self, fault: str, **detail: Any) -> None:
        self.events.append({"fault": fault, "at_s": round(time.monotonic() - self.started, 3), **detail})

    def step(self) -> None:
        done = self.rounds_done()
        for k in self.faults.kill:
            if k.peer not in self.killed and done[k.peer] >= k.after_round:
                self.procs[k.peer].kill()
                self.killed.add(k.peer)
                self._event("kill", peer=k.peer, rounds_done=done[k.peer])
        running = [d for i, d in enumerate(done) if self.procs[i].poll() is None]
        slowest = min(running, default=0)
        changed = False
        for i, part in enumerate(self.faults.partitions):
            state = self._partition_state.get(i)
            if state is None and running and slowest >= part.from_round:
                self._partition_state[i] = "cut"
                self._event("partition", index=i, rounds_done=slowest)
                changed = True
            elif state == "cut" and (not running or slowest >= part.to_round):
                self._partition_state[i] = "healed"
                self._event("heal", index=i, rounds_done=slowest)
                changed = True
        if changed:
            self.lan.cut(self.cut_links())

    def cut_links(self) -> list[tuple[int, int]]:
        links = []
        for i, part in enumerate(self.faults.partitions):
            if self._partition_state.get(i) == "cut":
                side = {p: g for g, members in enumerate(part.groups) for p in members}
                links += [(a, b) for a in side for b in side if side[a] != side[b]]
        return sorted(set(links))
