"""The part of a checkpoint both simulated runtimes share: every device's state, its intake's,
the recorder's, the runtime's random stream and (with ``devices``) the energy account."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from p2pfed.device import DeviceLoop
from p2pfed.engine.delivery import Delivery
from p2pfed.device.energy import EnergyMeter
from p2pfed.results.recorder import Recorder


def devices_state(loops: Sequence[DeviceLoop], delivery: Delivery, recorder: Recorder, rng: np.random.Generator,
                  energy: EnergyMeter | None) -> dict[str, Any]:
    """Checkpoint data (tensors, numbers, strings, lists, dicts) for ``load_devices_state``."""
    return {"devices": [loop.state_dict() for loop in loops],
            "intakes": [intake.state_dict() for intake in delivery.intakes],
            "recorder": recorder.state_dict(),
            "rng": json.dumps(rng.bit_generator.state),
            **({} if energy is None else {"energy": energy.state_dict()})}


def load_devices_state(state: dict[str, Any], loops: Sequence[DeviceLoop], delivery: Delivery, recorder: Recorder,
                       rng: np.random.Generator, energy: EnergyMeter | None) -> None:
    """Put back what ``devices_state`` saved (on a runtime built from the same scenario)."""
    for loop, saved in zip(loops, state["devices"], strict=True):
        loop.load_state_dict(saved)
    for intake, saved in zip(delivery.intakes, state["intakes"], strict=True):
        intake.load_state_dict(saved)
    recorder.load_state_dict(state["recorder"])
    rng.bit_generator.state = json.loads(state["rng"])
    if energy is not None:
        energy.load_state_dict(state["energy"])
