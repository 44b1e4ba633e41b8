"""What a method tells the memory checks about its own structures.

The pre-run check (``scenario/budget.py``) refuses a run that one structure alone could not fit,
naming the scenario field to change. The structures every run has (models, data, contacts) it
sizes itself; those only one method builds, the method sizes through ``Algorithm.memory_terms``,
so the check never names a method. Likewise the footprint estimate (``engine/footprint.py``)
asks the method what one device of its holds at a run's peak (``Algorithm.device_bytes``,
from ``DeviceFacts``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryFacts:
    """What a scenario says about sizes before anything is built."""

    devices: int                 # the federation's size, as far as it is known before reading data
    hidden: tuple[int, ...]      # ``model.hidden``: the MLP's hidden widths (the last: its features)


@dataclass(frozen=True)
class MemoryTerm:
    """A lower bound on the bytes one structure needs, and the scenario field that drives it."""

    field: str     # the scenario field the user would change
    nbytes: float
    what: str      # how the figure was reached, for the message


@dataclass(frozen=True)
class DeviceFacts:
    """What one device's memory depends on, known once the data are loaded and the model built."""

    model_bytes: int      # one model's parameters
    message_bytes: int    # one whole-model share, encoded
    degree: float         # mean neighbours per device
    data_bytes: float = 0.0   # one device's data arrays, on average
