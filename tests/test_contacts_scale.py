"""Random waypoint at scale: the k-d tree path against the all-pairs formulation it replaced."""

from __future__ import annotations

import time

import numpy as np
import pytest

from p2pfed.network.contacts import ContactPlan, make_contact, random_waypoint_contacts, waypoint_positions
from p2pfed.network.contacts.mobility import in_range_pairs, positions_over_time, sample_times, waypoint_legs

# ------------------------------------------------------------------ the reference (old code, verbatim)


def reference_positions(num_devices, duration_s, *, area_m, speed_mps, pause_s, step_s, rng):
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


def reference_contacts(num_devices, duration_s, *, area_m, speed_mps, pause_s, range_m, step_s,
                       bandwidth_bps, latency_s, rng):
    pos = reference_positions(num_devices, duration_s, area_m=area_m, speed_mps=speed_mps,
                              pause_s=pause_s, step_s=step_s, rng=rng)
    steps = pos.shape[0]
    times = np.arange(steps) * step_s
    iu, ju = np.triu_indices(num_devices, k=1)
    dist = np.linalg.norm(pos[:, iu] - pos[:, ju], axis=-1)
    close = dist < range_m
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


# ------------------------------------------------------------------ tests

SHIPPED = dict(area_m=(500.0, 500.0), speed_mps=(0.5, 1.5), pause_s=(0.0, 120.0), range_m=40.0,
               step_s=2.0, bandwidth_bps=2e6, latency_s=0.02)  # scenarios/opportunistic-rwp.yaml
FAST = dict(area_m=(100.0, 300.0), speed_mps=(1.0, 4.0), pause_s=(0.0, 0.0), range_m=60.0,
            step_s=0.7, bandwidth_bps=1e6, latency_s=0.0)
WIDE = dict(area_m=(200.0, 200.0), speed_mps=(1.0, 2.0), pause_s=(0.0, 30.0), range_m=1000.0,
            step_s=1.0, bandwidth_bps=1e6, latency_s=0.0)
NONE = dict(WIDE, range_m=0.0)


@pytest.mark.parametrize(("cfg", "devices", "duration"), [
    (SHIPPED, 36, 3600.0), (FAST, 20, 900.0), (WIDE, 6, 300.0), (NONE, 6, 300.0),
    (SHIPPED, 2, 7200.0), (SHIPPED, 1, 100.0), (SHIPPED, 0, 100.0)])
@pytest.mark.parametrize("seed", [0, 5])
def test_same_contacts_and_generator_state_as_the_all_pairs_reference(cfg, devices, duration, seed):
    rng_new, rng_ref = np.random.default_rng(seed), np.random.default_rng(seed)
    got = random_waypoint_contacts(devices, duration, rng=rng_new, **cfg)
    want = reference_contacts(devices, duration, rng=rng_ref, **cfg)
    assert got == want
    assert rng_new.random() == rng_ref.random()  # the same draws were consumed
    if cfg is SHIPPED and devices == 36:
        assert len(got) > 100


def test_same_positions_as_the_reference():
    kw = dict(area_m=(300.0, 120.0), speed_mps=(0.5, 3.0), pause_s=(0.0, 20.0), step_s=1.5)
    got = waypoint_positions(15, 1800.0, rng=np.random.default_rng(2), **kw)
    want = reference_positions(15, 1800.0, rng=np.random.default_rng(2), **kw)
    # Equal to the last bit or two: the reference's ``np.linalg.norm`` of one 2-vector goes through
    # BLAS ``dot``, which fuses multiply-adds on some CPUs (numpy 2.4 here: 1 ulp off on 0.7 % of
    # the positions), the vectorised path's norm over an axis does not. The contacts derived from
    # them are compared exactly above.
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("block", [1, 3, 17, 64])
def test_tree_blocks_find_exactly_the_pairs_in_range(block):
    """Whatever the block length, the widened k-d tree query misses no pair and keeps no extra."""
    n, cfg = 150, dict(area_m=(400.0, 400.0), speed_mps=(2.0, 5.0), pause_s=(0.0, 5.0))
    times = sample_times(600.0, 1.0)
    legs = waypoint_legs(n, float(times[-1]), rng=np.random.default_rng(1), **cfg)
    positions = list(positions_over_time(legs, times))
    iu, ju = np.triu_indices(n, k=1)
    found = in_range_pairs(iter(positions), n, 30.0, 5.0, 1.0, block=block)
    total = 0
    for pos, keys in zip(positions, found):
        close = np.linalg.norm(pos[iu] - pos[ju], axis=-1) < 30.0
        np.testing.assert_array_equal(keys, iu[close] * n + ju[close])
        total += keys.size
    assert total > 1000


def test_contact_plan_orders_like_sorted_and_answers_neighbours_like_the_snapshot():
    rng = np.random.default_rng(3)
    contacts = []
    for _ in range(400):
        a, b = rng.choice(12, size=2, replace=False)
        start = float(rng.integers(0, 20))  # many equal starts: ties broken by the later fields
        contacts.append(make_contact(int(a), int(b), start, start + float(rng.integers(1, 5)),
                                     float(rng.choice([1e6, 2e6])), 0.01))
    plan = ContactPlan(12, contacts)
    assert plan.contacts == sorted(contacts)
    for t in (0.0, 3.0, 7.5, 19.0, 30.0):
        snap = plan.snapshot(t)
        for d in range(12):
            assert plan.neighbours(d, t) == sorted(snap.neighbors(d))


@pytest.mark.slow
def test_ten_thousand_devices_over_eight_hours_within_a_minute():
    """Issue 12, goal 4: the shipped scenario's walk and radio, 10,000 devices, area grown to keep
    its density (36 devices per 500 m x 500 m), 8 simulated hours; CPU time, plan included."""
    side = 500.0 * np.sqrt(10_000 / 36)
    t0 = time.process_time()
    contacts = random_waypoint_contacts(10_000, 8 * 3600.0, rng=np.random.default_rng(5),
                                        **dict(SHIPPED, area_m=(side, side)))
    plan = ContactPlan(10_000, contacts)
    elapsed = time.process_time() - t0
    print(f"\n10,000 devices x 8 h: {len(plan)} contacts in {elapsed:.1f} s CPU")
    assert len(plan) > 100_000
    assert elapsed < 60.0
