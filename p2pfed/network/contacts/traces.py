"""Contact trace files: the ONE simulator's events, plain intervals, and SocioPatterns windows.

Formats (one record per line; blank lines and ``#`` comments are skipped; ids are any token):

- ``one``: ``<time> CONN <a> <b> up|down`` — the ONE simulator's connection events
  (Keränen et al., SIMUTools 2009); a link open when the trace ends is closed there;
- ``interval``: ``<a> <b> <start> <end>`` — one contact per line;
- ``sociopatterns``: ``t i j`` — i and j were in contact during ``[t - window, t]``; runs of
  windows that follow each other exactly are merged into one contact (SocioPatterns data sets).

Files may be gzip-compressed (``.gz``). Every problem names the file and the line.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from p2pfed.network.contacts.plan import ContactError
from p2pfed.textfile import not_text

FORMATS = ("one", "interval", "sociopatterns")


@dataclass(frozen=True)
class TraceContact:
    """A contact between two trace ids (not yet mapped to devices), in trace seconds."""

    a: str
    b: str
    start: float
    end: float


def _lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    if not path.exists():
        raise ContactError(f"{path}: trace file not found")
    opener: Callable[..., IO[Any]] = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                fields = line.split("#", 1)[0].split()
                if fields:
                    yield number, fields
    except UnicodeDecodeError:
        raise ContactError(not_text(path, "trace", opener)) from None
    except (OSError, EOFError) as exc:  # gzip reports a damaged file as OSError or EOFError
        raise ContactError(f"{path}: cannot read trace: {exc}") from None


def _number(path: Path, number: int, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ContactError(f"{path}:{number}: {what} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ContactError(f"{path}:{number}: {what} must be a finite number >= 0, got {text!r}")
    return value


def _time(path: Path, number: int, text: str, what: str, last_time: float) -> float:
    """A line's time, which must not go back before the previous line's."""
    t = _number(path, number, text, what)
    if t < last_time:
        raise ContactError(f"{path}:{number}: {what} {t} goes back before {last_time}")
    return t


def _pair(path: Path, number: int, a: str, b: str) -> tuple[str, str]:
    if a == b:
        raise ContactError(f"{path}:{number}: a contact needs two distinct ids, got {a!r} twice")
    return (a, b) if _id_key(a) <= _id_key(b) else (b, a)


def _id_key(node: str) -> tuple[int, int | str]:
    """Sort ids numerically when they are integers, else as text."""
    return (0, int(node)) if node.lstrip("-").isdigit() else (1, node)


def read_one(path: Path) -> list[TraceContact]:
    contacts: list[TraceContact] = []
    open_since: dict[tuple[str, str], float] = {}
    last_time = 0.0
    for number, f in _lines(path):
        if len(f) != 5 or f[1] != "CONN" or f[4] not in ("up", "down"):
            raise ContactError(f"{path}:{number}: expected '<time> CONN <a> <b> up|down', got {' '.join(f)!r}")
        t = last_time = _time(path, number, f[0], "time", last_time)
        pair = _pair(path, number, f[2], f[3])
        if f[4] == "up":
            open_since.setdefault(pair, t)   # a repeated 'up' keeps the link open since the first
        elif pair in open_since:
            start = open_since.pop(pair)
            if t > start:
                contacts.append(TraceContact(*pair, start, t))
        else:
            raise ContactError(f"{path}:{number}: 'down' for {pair[0]}-{pair[1]}, which is not up")
    contacts += [TraceContact(*pair, start, last_time) for pair, start in open_since.items()
                 if last_time > start]
    return contacts


def read_interval(path: Path) -> list[TraceContact]:
    contacts = []
    for number, f in _lines(path):
        if len(f) != 4:
            raise ContactError(f"{path}:{number}: expected '<a> <b> <start> <end>', got {' '.join(f)!r}")
        start = _number(path, number, f[2], "start")
        end = _number(path, number, f[3], "end")
        if not end > start:
            raise ContactError(f"{path}:{number}: end {end} is not after start {start}")
        contacts.append(TraceContact(*_pair(path, number, f[0], f[1]), start, end))
    return contacts


def read_sociopatterns(path: Path, window_s: float = 20.0) -> list[TraceContact]:
    runs: dict[tuple[str, str], list[float]] = {}   # pair -> [first window end, last window end]
    contacts, last_time = [], 0.0
    for number, f in _lines(path):
        if len(f) != 3:
            raise ContactError(f"{path}:{number}: expected 't i j', got {' '.join(f)!r}")
        t = last_time = _time(path, number, f[0], "t", last_time)
        pair = _pair(path, number, f[1], f[2])
        run = runs.get(pair)
        if run is not None and t - run[1] == window_s:
            run[1] = t
            continue
        if run is not None and t == run[1]:
            raise ContactError(f"{path}:{number}: duplicate line for {pair[0]}-{pair[1]} at t={t}")
        if run is not None:
            contacts.append(TraceContact(*pair, run[0] - window_s, run[1]))
        runs[pair] = [t, t]
    contacts += [TraceContact(*pair, first - window_s, last) for pair, (first, last) in runs.items()]
    return sorted(contacts, key=lambda c: (c.start, _id_key(c.a), _id_key(c.b)))


def read_trace(path: Path, fmt: str, *, window_s: float = 20.0) -> list[TraceContact]:
    """Read a trace file in one of ``FORMATS``."""
    if fmt == "one":
        return read_one(path)
    if fmt == "interval":
        return read_interval(path)
    if fmt == "sociopatterns":
        return read_sociopatterns(path, window_s)
    raise ContactError(f"unknown trace format {fmt!r}; choose one of {', '.join(FORMATS)}")


def map_nodes(contacts: list[TraceContact], num_devices: int, rule: str | list[int | str], *,
              allow_mismatch: bool = False, source: str = "trace") -> dict[str, int]:
    """Trace id -> device index, by a documented rule.

    ``sorted``: ids in ascending order (numerically when integers) become devices 0, 1, ...;
    ``most-active``: the ``num_devices`` ids in the most contacts (ties by id), in id order;
    a list: device i is the trace id ``rule[i]``.
    A trace with fewer ids than devices (or, for ``sorted``, more) is an error unless
    ``allow_mismatch``: then extra ids are left out and extra devices meet nobody.
    """
    activity: dict[str, int] = {}
    for c in contacts:
        activity[c.a] = activity.get(c.a, 0) + 1
        activity[c.b] = activity.get(c.b, 0) + 1
    ids = sorted(activity, key=_id_key)
    if isinstance(rule, list):
        chosen = [str(x) for x in rule]
        if len(chosen) != num_devices:
            raise ContactError(f"{source}: contacts.nodes lists {len(chosen)} ids for {num_devices} devices")
        if len(set(chosen)) != len(chosen):
            raise ContactError(f"{source}: contacts.nodes lists an id twice")
        unknown = [x for x in chosen if x not in activity]
        if unknown and not allow_mismatch:
            raise ContactError(f"{source}: contacts.nodes ids not in the trace: {', '.join(unknown[:10])}")
        return {x: i for i, x in enumerate(chosen) if x in activity}
    if rule not in ("sorted", "most-active"):
        raise ContactError(f"{source}: contacts.nodes must be 'sorted', 'most-active' or a list of ids, got {rule!r}")
    too_many = rule == "sorted" and len(ids) > num_devices
    if (len(ids) < num_devices or too_many) and not allow_mismatch:
        hint = "use contacts.nodes: most-active, or" if too_many else "set"
        raise ContactError(f"{source}: the trace has {len(ids)} ids but the scenario has {num_devices} devices "
                           f"({hint} contacts.allow_node_mismatch: true)")
    if rule == "most-active":
        ids = sorted(sorted(ids, key=lambda x: (-activity[x], _id_key(x)))[:num_devices], key=_id_key)
    return {x: i for i, x in enumerate(ids[:num_devices])}
