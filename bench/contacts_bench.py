"""Contact generation at scale: random waypoint (k-d tree) vs the all-pairs formulation it replaced.

The walk and radio are the shipped ``scenarios/opportunistic-rwp.yaml`` (0.5-1.5 m/s, pauses up
to 2 min, 40 m range, a sample every 2 s); the area grows with the device count to keep its
density (36 devices per 500 m x 500 m). Times are CPU seconds (process time), building the
``ContactPlan`` included; the all-pairs reference (kept in tests/test_contacts_scale.py) is
timed side by side at the sizes it can manage.

    python bench/contacts_bench.py [--devices 36,1000,10000] [--hours 8] [--reference-devices 36,300]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from p2pfed.network.contacts import ContactPlan, random_waypoint_contacts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_contacts_scale import SHIPPED, reference_contacts  # noqa: E402


def config(devices: int) -> dict:
    side = 500.0 * np.sqrt(devices / 36)
    return dict(SHIPPED, area_m=(side, side))


def timed(fn) -> tuple[float, object]:
    t = time.process_time()
    out = fn()
    return time.process_time() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="36,1000,10000")
    ap.add_argument("--hours", type=float, default=8.0)
    ap.add_argument("--reference-devices", default="36,300")
    ap.add_argument("--reference-hours", type=float, default=1.0)
    args = ap.parse_args()
    print(f"random waypoint, {args.hours:g} simulated hours, step 2 s, density of the shipped scenario")
    for n in (int(x) for x in args.devices.split(",")):
        cfg = config(n)
        secs, plan = timed(lambda: ContactPlan(n, random_waypoint_contacts(
            n, args.hours * 3600, rng=np.random.default_rng(5), **cfg)))
        print(f"  {n:6d} devices ({cfg['area_m'][0]:.0f} m square): {len(plan):9d} contacts, "
              f"{secs:6.1f} s CPU")
    print(f"against the all-pairs reference, {args.reference_hours:g} simulated hour(s):")
    for n in (int(x) for x in args.reference_devices.split(",")):
        cfg, dur = config(n), args.reference_hours * 3600
        new_s, new = timed(lambda: random_waypoint_contacts(n, dur, rng=np.random.default_rng(5), **cfg))
        ref_s, ref = timed(lambda: reference_contacts(n, dur, rng=np.random.default_rng(5), **cfg))
        print(f"  {n:6d} devices: k-d tree {new_s:6.2f} s, all pairs {ref_s:6.2f} s, "
              f"ratio {ref_s / new_s:5.1f}x, identical: {new == ref}")


if __name__ == "__main__":
    main()
