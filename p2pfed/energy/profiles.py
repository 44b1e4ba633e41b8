"""Device classes: how fast a device trains (FLOP/s), what each FLOP costs (J) and, optionally,
how much energy its battery holds (J).

The named classes are measured devices, each with the figures Jeff Geerling's HPL (Linpack)
results table gives for it (github.com/geerlingguy/top500-benchmark, README "Results", MIT
licence): the sustained rate HPL reached (double-precision dense linear algebra on every core
with a tuned BLAS) and the whole board's average power draw over the benchmark, read at the
wall; joules per FLOP = watts / (FLOP/s). A small model's training reaches a different fraction of
the chip's peak than HPL, and a bare board is not a phone's power budget: these are published
figures of sustained arithmetic and power for classes of hardware, not of p2pfed's training on
them. ``watch``, ``phone`` and ``laptop`` name the nearest measured device. Give your own figures
(``devices.profiles`` entries with ``flops_per_s`` and ``joules_per_flop``, or a file) for a study
that depends on them.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from p2pfed.yamltext import load_yaml


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    flops_per_s: float
    joules_per_flop: float
    battery_j: float | None = None   # None: no battery limit

    def with_battery(self, battery_j: float | None) -> DeviceProfile:
        return self if battery_j is None else replace(self, battery_j=float(battery_j))


@dataclass(frozen=True)
class MeasuredDevice:
    """One row of the HPL results table the classes come from (module docstring)."""
    name: str
    device: str         # as the table names it
    gflops: float       # HPL's result
    watts: float        # average power over the benchmark

    def profile(self) -> DeviceProfile:
        return DeviceProfile(self.name, self.gflops * 1e9, self.watts / (self.gflops * 1e9))


MEASURED: tuple[MeasuredDevice, ...] = (
    MeasuredDevice("pi-zero-2w", "Raspberry Pi Zero 2 W (RP3A0-AU)", 0.370, 2.1),
    MeasuredDevice("pi-4", "Raspberry Pi 4 (BCM2711)", 11.889, 7.2),
    MeasuredDevice("pi-5", "Raspberry Pi 5 8 GB (BCM2712)", 35.169, 12.7),
    MeasuredDevice("qcs6490", "Radxa Dragon Q6A (Qualcomm QCS6490)", 48.408, 10.1),
    MeasuredDevice("a18-pro", "MacBook Neo (A18 Pro)", 57.012, 10.6),
    MeasuredDevice("ryzen-ai-340", "Framework 13 AMD (AMD Ryzen AI 340)", 88.787, 41.6),
)
ROLES = {"watch": "pi-zero-2w", "phone": "qcs6490", "laptop": "ryzen-ai-340"}
"""The classes a user thinks in, each the nearest measured device: a watch's few small cores at
about 2 W, a phone-class Qualcomm SoC, a laptop."""

PROFILES: dict[str, DeviceProfile] = {m.name: m.profile() for m in MEASURED}
PROFILES |= {role: replace(PROFILES[device], name=role) for role, device in ROLES.items()}
RETIRED = {"phone-2019": "phone"}
"""Classes that once had illustrative figures: refused by name, with the class that replaces them."""


def unknown_class(name: str) -> str:
    """Why ``name`` is not a named class, in words for an error message."""
    if name in RETIRED:
        return (f"{name!r} had illustrative figures and is gone; the named classes are measured devices "
                f"now: use {RETIRED[name]!r}, or give flops_per_s and joules_per_flop")
    return (f"{name!r} is not a named class ({', '.join(sorted(PROFILES))}); give flops_per_s and "
            "joules_per_flop for a class of your own")


def assign_by_fraction(shares: Sequence[tuple[DeviceProfile, float]], num_devices: int,
                       rng: np.random.Generator) -> list[DeviceProfile]:
    """Each device's profile: the devices in an order drawn from ``rng``, the first
    ``round(f1 * n)`` to the first profile, and so on; the last profile takes the rest (the
    fractions sum to 1)."""
    order = [int(d) for d in rng.permutation(num_devices)]
    out: list[DeviceProfile | None] = [None] * num_devices
    start = 0
    for k, (profile, fraction) in enumerate(shares):
        count = num_devices - start if k == len(shares) - 1 else min(round(fraction * num_devices),
                                                                       num_devices - start)
        for d in order[start:start + count]:
            out[d] = profile
        start += count
    assert all(p is not None for p in out)
    return [p for p in out if p is not None]


def read_profile_file(path: Path, num_devices: int) -> list[DeviceProfile]:
    """Per-device figures from a CSV file (a header row) or a YAML list of mappings: ``device``
    (its id) and either ``profile`` (a named class) or ``flops_per_s`` and ``joules_per_flop``;
    ``battery_j`` optional. Every device must appear once. Raises ValueError, one line a problem."""
    path = Path(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        loaded = load_yaml(path.read_text())
        rows: list[dict[str, Any]] = loaded if isinstance(loaded, list) else []
        if not isinstance(loaded, list) or not all(isinstance(r, dict) for r in loaded):
            raise ValueError(f"{path}: expected a list of mappings (device, profile or flops_per_s and "
                             "joules_per_flop, battery_j)")
    else:
        with path.open(newline="") as fh:
            rows = [{k: v for k, v in row.items() if v not in (None, "")} for row in csv.DictReader(fh)]
    found: dict[int, DeviceProfile] = {}
    problems = []
    for line, row in enumerate(rows, start=2 if path.suffix.lower() not in (".yaml", ".yml") else 1):
        try:
            device = int(row["device"])
            if not 0 <= device < num_devices:
                raise ValueError(f"device {device} is not one of 0..{num_devices - 1}")
            if device in found:
                raise ValueError(f"device {device} appears twice")
            found[device] = _profile_of(row)
        except (KeyError, ValueError, TypeError) as exc:
            problems.append(f"{path}: row {line}: {exc if not isinstance(exc, KeyError) else f'no {exc} column'}")
    missing = sorted(set(range(num_devices)) - set(found))
    if missing and not problems:
        problems.append(f"{path}: devices {missing} have no row (every device needs one)")
    if problems:
        raise ValueError("\n".join(problems))
    return [found[d] for d in range(num_devices)]


def _profile_of(row: dict[str, Any]) -> DeviceProfile:
    battery = row.get("battery_j")
    battery_j = None if battery is None else _positive(battery, "battery_j")
    name = row.get("profile")
    if name is not None and "flops_per_s" not in row and "joules_per_flop" not in row:
        if str(name) not in PROFILES:
            raise ValueError(f"profile {unknown_class(str(name))}")
        return PROFILES[str(name)].with_battery(battery_j)
    return DeviceProfile(str(name or "file"), _positive(row["flops_per_s"], "flops_per_s"),
                         _positive(row["joules_per_flop"], "joules_per_flop", zero=True), battery_j)


def _positive(value: Any, what: str, zero: bool = False) -> float:
    x = float(value)
    if not np.isfinite(x) or x < 0 or (x == 0 and not zero):
        raise ValueError(f"{what} must be a finite number {'>= 0' if zero else '> 0'}, got {value!r}")
    return x
