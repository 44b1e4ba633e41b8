"""Pairwise contacts as an alternating renewal process: gap, contact, gap, contact, ...

Every pair of devices meets independently. Inter-contact gaps are exponential (a Poisson
process of meetings) or Pareto with shape ``alpha`` scaled to the same mean — the heavy tail
measured in human traces (Chaintreau et al., "Impact of human mobility on opportunistic
forwarding algorithms", IEEE TMC 2007). Contact durations are exponential.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from p2pfed.network.contacts.plan import Contact, ContactError, make_contact


def _gap(rng: np.random.Generator, mean_s: float, law: str, alpha: float) -> float:
    if law == "exponential":
        return float(rng.exponential(mean_s))
    # Pareto with minimum x_m has mean alpha x_m / (alpha - 1); choose x_m to match mean_s.
    x_m = mean_s * (alpha - 1.0) / alpha
    return float(x_m * (1.0 + rng.pareto(alpha)))


def poisson_contacts(num_devices: int, duration_s: float, *, mean_intercontact_s: float,
                     mean_duration_s: float, bandwidth_bps: float, latency_s: float,
                     rng: np.random.Generator,
                     intercontact: Literal["exponential", "power-law"] = "exponential",
                     alpha: float = 1.5) -> list[Contact]:
    """Every pair's contacts in ``[0, duration_s)``; a contact still open at the end is cut there."""
    if intercontact == "power-law" and alpha <= 1.0:
        raise ContactError(f"contacts.power_law_alpha must be > 1 for a finite mean, got {alpha}")
    contacts = []
    for a in range(num_devices):
        for b in range(a + 1, num_devices):
            t = _gap(rng, mean_intercontact_s, intercontact, alpha)
            while t < duration_s:
                length = float(rng.exponential(mean_duration_s))
                end = min(t + length, duration_s)
                if end > t:
                    contacts.append(make_contact(a, b, t, end, bandwidth_bps, latency_s))
                t = t + length + _gap(rng, mean_intercontact_s, intercontact, alpha)
    return contacts
