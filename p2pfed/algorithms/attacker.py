"""Attacks of the user's own: a class that decides what an adversarial device shares.

A researcher brings an attack the way they bring a method: a subclass of ``Attacker`` in a file
named in the scenario (``adversaries: [{kind: my_attack.py:MyAttack, fraction: 0.2}]``, resolved
once when the scenario loads, relative to its folder), a module (``package.module:MyAttack``) or
an installed package's entry point in the group ``p2pfed.attacks``. The attack wraps the
device's method like the shipped kinds (``attacks.adversarial``): the device trains and fuses as
its method does, and each round the attack's ``share`` turns its honest parts into the parts it
sends. It sees what the device sees in a serverless network: its own model and the artifacts its
neighbours sent (``device.cache``), nothing else. Its randomness comes from ``self.rng``, a
generator drawn from the run's seed for that device, saved in checkpoints with the attack's
``state_dict``; ``self.options`` are the adversary entry's ``options``.

The contract an attack keeps (``p2pfed.testing.check_attack``): its state round-trips, the same
seed gives the same numbers, and every message it makes passes the honest receivers' checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from p2pfed.algorithms.base import Algorithm
from p2pfed.algorithms.payloads import Payload
from p2pfed.plugins import PluginError, entry_point, entry_point_names, is_plugin_name, load_object

ENTRY_POINTS = "p2pfed.attacks"


class Attacker:
    """One adversarial device's attack; subclass it and override ``share``."""

    name: ClassVar[str] = "attack"   # its label in results

    def __init__(self, options: Mapping[str, Any], rng: np.random.Generator) -> None:
        self.options = dict(options)
        self.rng = rng

    def share(self, device: Algorithm, round: int, parts: list[Payload]) -> list[Payload]:
        """The parts ``device`` sends in ``round`` instead of its honest ``parts`` (each a new
        ``Payload``; the honest ones are the method's own and must not be changed in place)."""
        return parts

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the attack (its generator's state; extend it with your own)."""
        return {"rng": json.dumps(self.rng.bit_generator.state)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = json.loads(state["rng"])


def attack_class(name: str, search: Sequence[Path] = ()) -> type[Attacker]:
    """The attack class ``name`` names (``file.py:Class``, ``module:Class`` or an installed entry
    point); ``search``: the folders a user's file is looked for in (the scenario's)."""
    if is_plugin_name(name):
        found = load_object(name, search, what="adversaries.kind")
    else:
        found = entry_point(ENTRY_POINTS, name)
        if found is None:
            installed = entry_point_names(ENTRY_POINTS)
            raise PluginError(f"unknown attack {name!r}" + (f"; installed: {', '.join(installed)}" if installed else "")
                              + "; or name your own class as module:Class or path/to/file.py:Class")
    if not (isinstance(found, type) and issubclass(found, Attacker)):
        raise PluginError(f"adversaries.kind: {name!r} is not a subclass of p2pfed.algorithms.Attacker")
    return found
