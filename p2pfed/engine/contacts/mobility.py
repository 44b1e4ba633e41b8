"""Random-waypoint mobility (Johnson & Maltz, 1996; the ONE simulator's default movement model).

Each device picks a uniform point in the rectangle, walks to it at a uniform speed from the
speed range, pauses for a uniform time from the pause range, and repeats. Positions are sampled
every ``step_s``; two devices are in contact while their distance is strictly below the radio
range, so a contact is resolved to the sampling step (it starts at the first sample in range
and ends at the first sample out of range).
"""

from __future__ import annotations

import numpy as np

from p2pfed.engine.contacts.plan import Contact, ContactError, make_contact


def waypoint_positions(num_devices: int, duration_s: float, *, area_m: tuple[float, float],
                       speed_mps: tuple[float, float], pause_s: tuple[float, float], step_s: float,
                       rng: np.random.Generator) -> np.ndarray:
    """Positions, shape (steps, devices, 2), sampled at t = 0, step_s, 2 step_s, ... <= duration_s."""
    if speed_mps[0] <= 0 or speed_mps[1] < speed_mps[0]:
        raise ContactError(f"contacts.speed_mps must be 0 < min <= max, got {list(speed_mps)}")
    if pause_s[0] < 0 or pause_s[1] < pause_s[0]:
        raise ContactError(f"contacts.pause_s must be 0 <= min <= max, got {list(pause_s)}")
    area = np.asarray(area_m, dtype=float)
    times = np.arange(0.0, duration_s + 1e-9, step_s)
    out = np.empty((times.size, num_devices, 2))
    for i in range(num_devices):
        pos = rng.uniform(0, area)
        t, k = 0.0, 0
        while k < times.size:
            target = rng.uniform(0, area)
            speed = rng.uniform(*speed_mps)
            travel = float(np.linalg.norm(target - pos)) / speed
            arrive = t + travel
            while k < times.size and times[k] < arrive:
                frac = (times[k] - t) / travel if travel > 0 else 1.0
                out[k, i] = pos + frac * (target - pos)
                k += 1
            pause_end = arrive + rng.uniform(*pause_s)
            while k < times.size and times[k] < pause_end:
                out[k, i] = target
                k += 1
            pos, t = target, pause_end
    return out


def random_waypoint_contacts(num_devices: int, duration_s: float, *, area_m: tuple[float, float],
                             speed_mps: tuple[float, float], pause_s: tuple[float, float],
                             range_m: float, step_s: float, bandwidth_bps: float, latency_s: float,
                             rng: np.random.Generator) -> list[Contact]:
    """Contacts while two devices are within ``range_m`` of each other."""
    pos = waypoint_positions(num_devices, duration_s, area_m=area_m, speed_mps=speed_mps,
                             pause_s=pause_s, step_s=step_s, rng=rng)
    steps = pos.shape[0]
    times = np.arange(steps) * step_s
    iu, ju = np.triu_indices(num_devices, k=1)
    dist = np.linalg.norm(pos[:, iu] - pos[:, ju], axis=-1)       # (steps, pairs)
    close = dist < range_m
    # Edges of each run of in-range samples: +1 where a run starts, -1 where it ends.
    padded = np.zeros((steps + 2, close.shape[1]), dtype=np.int8)
    padded[1:-1] = close
    change = np.diff(padded, axis=0)
    contacts = []
    for p in np.flatnonzero(close.any(axis=0)):
        starts = np.flatnonzero(change[:, p] == 1)
        ends = np.flatnonzero(change[:, p] == -1)
        for s, e in zip(starts, ends):
            end_t = times[e] if e < steps else duration_s
            if end_t > times[s]:
                contacts.append(make_contact(int(iu[p]), int(ju[p]), times[s], end_t, bandwidth_bps, latency_s))
    return contacts
