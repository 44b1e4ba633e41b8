"""The scenario's ``devices`` section as an ``EnergyPlan``: which class each device is (drawn by
fraction from the seed, or read from a file), its radio and its battery."""

from __future__ import annotations

from pathlib import Path

from p2pfed.energy import PROFILES, RADIOS, DeviceProfile, EnergyPlan, Radio, assign_by_fraction, read_profile_file
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.randomness import stream
from p2pfed.scenario.schema import DevicesSection, ProfileEntry


def build_energy_plan(section: DevicesSection, num_devices: int, *, seed: int, file: Path | None,
                      source: str) -> EnergyPlan | None:
    """None when the scenario does not opt in (no ``devices`` section): nothing of the energy
    model runs then. Classes by fraction are drawn from ``seed``'s own stream; ``file``: the
    profile file, resolved. A bad profile file is a ScenarioError naming ``source``'s field."""
    if not section.opted_in():
        return None
    profiles: list[DeviceProfile] | None = None
    if section.profiles:
        profiles = assign_by_fraction([(_profile(e), e.fraction) for e in section.profiles], num_devices,
                                      stream(seed, "device-profiles"))
    elif file is not None:
        try:
            profiles = read_profile_file(file, num_devices)
        except (OSError, ValueError) as exc:
            raise ScenarioError([f"{source}: devices.file: {line}" for line in str(exc).splitlines()]) from None
    own = [None] * num_devices if profiles is None else [p.battery_j for p in profiles]
    batteries = tuple(section.battery_j if b is None else b for b in own)
    return EnergyPlan(num_devices, None if profiles is None else tuple(profiles), _radio(section), batteries,
                      recharge_every_s=section.recharge_every_s, recharge_at_s=section.recharge_at_s)


def _profile(entry: ProfileEntry) -> DeviceProfile:
    base = PROFILES.get(entry.name)
    flops = entry.flops_per_s if entry.flops_per_s is not None else base.flops_per_s if base else None
    joules = entry.joules_per_flop if entry.joules_per_flop is not None else base.joules_per_flop if base else None
    assert flops is not None and joules is not None   # the schema requires them for a class of one's own
    return DeviceProfile(entry.name, flops, joules, entry.battery_j)


def _radio(section: DevicesSection) -> Radio | None:
    if section.radio is None:
        return None
    if isinstance(section.radio, str):
        return RADIOS[section.radio]
    r = section.radio
    return Radio("custom", r.send_j_per_byte, r.receive_j_per_byte, tail_w=r.tail_w, tail_s=r.tail_s, idle_w=r.idle_w)
