"""Random-waypoint mobility (Johnson & Maltz, 1996; the ONE simulator's default movement model).

Each device picks a uniform point in the rectangle, walks to it at a uniform speed from the
speed range, pauses for a uniform time from the pause range, and repeats. Positions are sampled
every ``step_s``; two devices are in contact while their distance is strictly below the radio
range, so a contact is resolved to the sampling step (it starts at the first sample in range
and ends at the first sample out of range).

Built to scale to thousands of devices over hours: each device's walk is drawn as a list of legs
(one vectorised pass per device), positions are produced one sample time at a time instead of as
a (steps, devices, 2) array, and pairs in range come from a k-d tree
(``scipy.spatial.cKDTree``) instead of an all-pairs distance matrix. The tree is queried once
per block of steps, with the range widened by the farthest two devices can close in on each
other within the block (both at top speed), and only those candidate pairs are measured at each
step. The random draws, their order and the arithmetic are those of the original per-device,
all-pairs formulation, so a seed gives the same contacts (a test keeps that formulation as the
reference).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import numpy as np

from p2pfed.network.contacts.plan import Contact, ContactError

_CHUNK = 1 << 16  # uniforms drawn at a time


@dataclass(frozen=True)
class Legs:
    """Every device's walk, flattened: leg ``j`` goes from ``origin[j]`` (left at ``start[j]``)
    to ``target[j]`` (reached at ``arrive[j]``) and pauses there until ``end[j]``.
    Device ``i``'s legs are ``first[i]`` up to ``first[i + 1]``; its last leg ends after the
    last sample time."""

    start: np.ndarray
    arrive: np.ndarray
    end: np.ndarray
    travel: np.ndarray
    origin: np.ndarray
    target: np.ndarray
    first: np.ndarray


def _check(speed_mps: tuple[float, float], pause_s: tuple[float, float]) -> None:
    if speed_mps[0] <= 0 or speed_mps[1] < speed_mps[0]:
        raise ContactError(f"contacts.speed_mps must be 0 < min <= max, got {list(speed_mps)}")
    if pause_s[0] < 0 or pause_s[1] < pause_s[0]:
        raise ContactError(f"contacts.pause_s must be 0 <= min <= max, got {list(pause_s)}")


def sample_times(duration_s: float, step_s: float) -> np.ndarray:
    """The sample times t = 0, step_s, 2 step_s, ... <= duration_s."""
    return np.arange(0.0, duration_s + 1e-9, step_s)


class _Uniforms:
    """The generator's uniform stream, read ahead in chunks; ``rewind_to_used`` leaves the
    generator exactly where drawing only the values used would have (``rng.uniform(lo, hi)``
    is ``lo + (hi - lo) * u`` for the next ``u`` of this stream)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.state = rng.bit_generator.state
        self.buf = np.empty(0)
        self.pos = 0
        self.used = 0

    def peek(self, count: int) -> np.ndarray:
        if self.pos + count > self.buf.size:
            self.buf = np.concatenate([self.buf[self.pos:], self.rng.random(max(count, _CHUNK))])
            self.pos = 0
        return self.buf[self.pos:self.pos + count]

    def take(self, count: int) -> None:
        self.pos += count
        self.used += count

    def rewind_to_used(self) -> None:
        self.rng.bit_generator.state = self.state
        for start in range(0, self.used, _CHUNK):
            self.rng.random(min(_CHUNK, self.used - start))


def waypoint_legs(num_devices: int, last_t: float, *, area_m: tuple[float, float],
                  speed_mps: tuple[float, float], pause_s: tuple[float, float],
                  rng: np.random.Generator) -> Legs:
    """Each device's legs until one ends after ``last_t``; device by device, the draws of the
    original loop: start point (x, y), then per leg target (x, y), speed, pause."""
    _check(speed_mps, pause_s)
    area = np.asarray(area_m, dtype=float)
    s_lo, s_hi = float(speed_mps[0]), float(speed_mps[1])
    p_lo, p_hi = float(pause_s[0]), float(pause_s[1])
    stream = _Uniforms(rng)
    parts: list[tuple[np.ndarray, ...]] = []
    first = np.zeros(num_devices + 1, dtype=np.int64)
    guess = 16
    for i in range(num_devices):
        while True:
            u = stream.peek(2 + 4 * guess)
            pos = area * u[:2]
            legs = u[2:].reshape(guess, 4)
            target = area * legs[:, :2]
            speed = s_lo + (s_hi - s_lo) * legs[:, 2]
            pause = p_lo + (p_hi - p_lo) * legs[:, 3]
            origin = np.concatenate([pos[None], target[:-1]])
            travel = np.linalg.norm(target - origin, axis=-1) / speed
            # the clock as the loop advanced it: t + travel, then + pause, leg after leg
            clock = np.empty(2 * guess)
            clock[0::2], clock[1::2] = travel, pause
            np.cumsum(clock, out=clock)
            arrive, end = clock[0::2], clock[1::2]
            over = np.flatnonzero(end > last_t)
            if over.size:
                break
            guess *= 2
        count = int(over[0]) + 1
        stream.take(2 + 4 * count)
        start = np.concatenate([[0.0], end[:count - 1]])
        parts.append((start, arrive[:count], end[:count], travel[:count], origin[:count],
                      target[:count]))
        first[i + 1] = first[i] + count
        guess = max(16, count + count // 4)
    stream.rewind_to_used()
    if not parts:
        empty, empty2 = np.empty(0), np.empty((0, 2))
        return Legs(empty, empty, empty, empty, empty2, empty2, first)
    start, arrive, end, travel, origin, target = [np.concatenate(c) for c in zip(*parts)]
    return Legs(start, arrive, end, travel, origin, target, first)


def positions_over_time(legs: Legs, times: np.ndarray) -> Iterator[np.ndarray]:
    """Every device's position (devices, 2) at each of ``times`` (increasing), one at a time.

    Each device's current leg is kept in dense arrays, refreshed only for the devices whose leg
    changed (a few per sample), so a sample costs a handful of operations over all devices.
    """
    n = legs.first.size - 1
    cursor = legs.first[:-1].copy()
    end, arrive, start = legs.end[cursor], legs.arrive[cursor], legs.start[cursor]
    travel, origin, target = legs.travel[cursor], legs.origin[cursor], legs.target[cursor]
    span = target - origin
    pos = np.empty((n, 2))
    for t in times:
        finished = np.flatnonzero(end <= t)
        while finished.size:  # move on from legs whose pause ended at or before t
            cursor[finished] += 1
            j = cursor[finished]
            end[finished], arrive[finished], start[finished] = legs.end[j], legs.arrive[j], legs.start[j]
            travel[finished], origin[finished], target[finished] = legs.travel[j], legs.origin[j], legs.target[j]
            span[finished] = target[finished] - origin[finished]
            finished = finished[end[finished] <= t]
        moving = t < arrive
        with np.errstate(divide="ignore", invalid="ignore"):  # travel is 0 only where not moving
            frac = (t - start) / travel
        # origin + frac * (target - origin) while walking, the target while paused
        np.multiply(frac[:, None], span, out=pos)
        np.add(origin, pos, out=pos)
        np.copyto(pos, target, where=~moving[:, None])
        yield pos.copy()


def waypoint_positions(num_devices: int, duration_s: float, *, area_m: tuple[float, float],
                       speed_mps: tuple[float, float], pause_s: tuple[float, float], step_s: float,
                       rng: np.random.Generator) -> np.ndarray:
    """Positions, shape (steps, devices, 2), sampled at t = 0, step_s, 2 step_s, ... <= duration_s."""
    times = sample_times(duration_s, step_s)
    legs = waypoint_legs(num_devices, float(times[-1]), area_m=area_m, speed_mps=speed_mps,
                         pause_s=pause_s, rng=rng)
    out = np.empty((times.size, num_devices, 2))
    for k, pos in enumerate(positions_over_time(legs, times)):
        out[k] = pos
    return out


def _sorted_member(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For sorted unique ``a`` and ``b``: which entries of ``a`` are in ``b``."""
    if b.size == 0:
        return np.zeros(a.size, dtype=bool)
    idx = np.searchsorted(b, a)
    idx[idx == b.size] = 0
    return cast(np.ndarray, b[idx] == a)


def in_range_pairs(positions: Iterator[np.ndarray], num_devices: int, range_m: float,
                   max_speed_mps: float, step_s: float, block: int | None = None
                   ) -> Iterator[np.ndarray]:
    """Per sample, the pairs strictly closer than ``range_m`` as sorted keys ``a * n + b`` (a < b).

    A k-d tree is queried at the first sample of each block of ``block`` samples, with the range
    widened by ``2 * max_speed_mps * step_s * (block - 1)`` (how far two devices can close in on
    each other in the block), so every pair in range at any sample of the block is a candidate;
    candidates are then measured at each sample exactly as ``np.linalg.norm`` of the difference.
    """
    n = num_devices
    if block is None:
        # widen by ~1.5 ranges: a few times more candidates than pairs in range, one tree per
        # ~10 samples at walking speed (the cheapest balance measured at 10,000 devices)
        block = max(1, min(64, int(1.5 * range_m / (2.0 * max_speed_mps * step_s)) + 1))
    reach = range_m + 2.0 * max_speed_mps * step_s * (block - 1)
    reach = reach * (1 + 1e-9) + 1e-6  # rounding of sampled positions and of the tree's distances
    from scipy.spatial import cKDTree   # here: only mobility plans need it, and it is slow to import

    a = b = keys = np.empty(0, dtype=np.int64)
    for k, pos in enumerate(positions):
        if k % block == 0:
            tree = cKDTree(pos, balanced_tree=False, compact_nodes=False)  # built once, queried once
            pairs = tree.query_pairs(reach, output_type="ndarray").astype(np.int64)  # rows i < j
            keys = pairs[:, 0] * n + pairs[:, 1]
            order = np.argsort(keys)
            keys, a, b = keys[order], pairs[order, 0], pairs[order, 1]
        if range_m <= 0 or keys.size == 0:
            yield keys[:0]
            continue
        x, y = pos[:, 0], pos[:, 1]
        dx, dy = x[a] - x[b], y[a] - y[b]
        # np.linalg.norm(pos[a] - pos[b], axis=-1) computes exactly this: sqrt(dx*dx + dy*dy)
        dist = np.sqrt(dx * dx + dy * dy)
        yield keys[dist < range_m]


def random_waypoint_contacts(num_devices: int, duration_s: float, *, area_m: tuple[float, float],
                             speed_mps: tuple[float, float], pause_s: tuple[float, float],
                             range_m: float, step_s: float, bandwidth_bps: float, latency_s: float,
                             rng: np.random.Generator) -> list[Contact]:
    """Contacts while two devices are within ``range_m`` of each other, ordered by pair (a, b)
    then start."""
    sample_t = sample_times(duration_s, step_s)
    legs = waypoint_legs(num_devices, float(sample_t[-1]), area_m=area_m, speed_mps=speed_mps,
                         pause_s=pause_s, rng=rng)
    if num_devices < 2:
        return []
    steps = sample_t.size
    times = np.arange(steps) * step_s
    # Edges of each pair's runs of in-range samples: a start where it enters, an end where it leaves.
    starts_k, starts_s, ends_k, ends_s = [], [], [], []
    prev = np.empty(0, dtype=np.int64)
    close_pairs = in_range_pairs(positions_over_time(legs, sample_t), num_devices, range_m,
                                 float(speed_mps[1]), step_s)
    for k, cur in enumerate(close_pairs):
        entered = cur[~_sorted_member(cur, prev)]
        left = prev[~_sorted_member(prev, cur)]
        starts_k.append(entered)
        starts_s.append(np.full(entered.size, k))
        ends_k.append(left)
        ends_s.append(np.full(left.size, k))
        prev = cur
    ends_k.append(prev)
    ends_s.append(np.full(prev.size, steps))
    sk, ss = np.concatenate(starts_k), np.concatenate(starts_s)
    ek, es = np.concatenate(ends_k), np.concatenate(ends_s)
    # a pair's runs alternate start, end: sorted by (pair, step), the i-th start meets the i-th end
    o_s, o_e = np.lexsort((ss, sk)), np.lexsort((es, ek))
    sk, ss, es = sk[o_s], ss[o_s], es[o_e]
    start_t = times[ss]
    end_t = np.where(es < steps, times[np.minimum(es, steps - 1)], duration_s)
    keep = end_t > start_t
    sk, start_t, end_t = sk[keep], start_t[keep], end_t[keep]
    a, b = (sk // num_devices).tolist(), (sk % num_devices).tolist()
    bw, lat = float(bandwidth_bps), float(latency_s)
    # a < b and end > start hold by construction: skip make_contact's checks (millions of contacts)
    return [Contact(s, e, i, j, bw, lat) for s, e, i, j in zip(start_t.tolist(), end_t.tolist(), a, b)]
