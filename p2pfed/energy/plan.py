"""What a scenario's ``devices`` section decided for each device: the plain data the runtimes'
energy accounting (``p2pfed.device.energy.EnergyMeter``) starts from."""

from __future__ import annotations

from dataclasses import dataclass

from p2pfed.energy.profiles import DeviceProfile
from p2pfed.energy.radio import Radio


@dataclass(frozen=True)
class EnergyPlan:
    """``profiles``: each device's (None: steps take no simulated time and no compute energy);
    ``radio``: what a byte costs (None: communication is free); ``batteries``: each device's
    capacity in J (None: unlimited); recharges refill every battery at ``recharge_at_s`` and every
    ``recharge_every_s`` after it (None: never)."""

    num_devices: int
    profiles: tuple[DeviceProfile, ...] | None
    radio: Radio | None
    batteries: tuple[float | None, ...]
    recharge_every_s: float | None = None
    recharge_at_s: float | None = None

    @property
    def has_batteries(self) -> bool:
        return any(b is not None for b in self.batteries)

    def first_recharge_s(self) -> float | None:
        if self.recharge_every_s is None:
            return None
        return self.recharge_every_s if self.recharge_at_s is None else self.recharge_at_s
