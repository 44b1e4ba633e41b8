"""Devices as they are: how fast each one computes, what its radio and its arithmetic cost in
joules, and how much its battery holds. Plain figures and functions; the runtimes'
accounting of them is ``p2pfed.device.energy``."""

from p2pfed.energy.plan import EnergyPlan
from p2pfed.energy.profiles import PROFILES, DeviceProfile, assign_by_fraction, read_profile_file
from p2pfed.energy.radio import RADIOS, Radio
from p2pfed.energy.work import forward_macs, training_flops

__all__ = ["PROFILES", "RADIOS", "DeviceProfile", "EnergyPlan", "Radio", "assign_by_fraction",
           "forward_macs", "read_profile_file", "training_flops"]
