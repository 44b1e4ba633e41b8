"""Churn: when each device is offline (switched off, out of coverage), as alternating renewals."""

from __future__ import annotations

import numpy as np


def churn_intervals(num_devices: int, duration_s: float, mean_online_s: float, mean_offline_s: float,
                    rng: np.random.Generator) -> list[tuple[int, float, float]]:
    """``(device, off_from, off_until)`` with exponential on and off durations; all start online."""
    out = []
    for i in range(num_devices):
        t = float(rng.exponential(mean_online_s))
        while t < duration_s:
            off = float(rng.exponential(mean_offline_s))
            out.append((i, t, min(t + off, duration_s)))
            t += off + float(rng.exponential(mean_online_s))
    return out
