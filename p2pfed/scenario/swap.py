"""Running a scenario with another method than its file names: what is kept, what is left out, and why.

A scenario written for FedSub carries FedSub's options and forwards FedSub's parts; another method
(``--algorithm``, ``--set algorithm.name=``, ``compare --algorithms``, the API's ``algorithm=``)
keeps the options it knows and the parts it sends. What it cannot keep is left out, never
silently: the ``Swap`` is logged once as a warning and written to ``summary.json``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from p2pfed.algorithms import Algorithm

LOG = logging.getLogger("p2pfed.swap")


@dataclass(frozen=True)
class Swap:
    """A method swapped in for the file's: ``left_out`` maps each field dropped to the reason."""

    from_method: str
    to_method: str
    left_out: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``summary.json`` ``swapped`` section."""
        return {"from": self.from_method, "to": self.to_method, "left_out": dict(self.left_out)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Swap:
        """The swap ``to_dict`` wrote (a bundle's ``plan.json`` carries it to the merged results)."""
        return cls(str(data["from"]), str(data["to"]), {str(k): str(v) for k, v in data["left_out"].items()})

    def message(self) -> str:
        head = f"{self.to_method} runs in place of {self.from_method}"
        if not self.left_out:
            return f"{head}; it keeps every setting"
        return f"{head}; left out: " + "; ".join(f"{k} ({why})" for k, why in self.left_out.items())

    def log(self) -> None:
        LOG.warning(self.message())


def swap_method(raw: dict[str, Any], from_method: str, cls: type[Algorithm], *,
                kept: Collection[str] = (), forwarding_given: bool = False) -> Swap:
    """Fit a raw scenario whose ``algorithm.name`` now names ``cls`` to that method, in place.

    The file's options ``cls`` does not know are left out, except those in ``kept`` (set for the
    new method on the command line, so still checked); unless ``forwarding_given``, the forwarded
    parts it does not send are left out, and forwarding is off when none is left."""
    name = str(raw["algorithm"]["name"])
    known = set(cls.Options.model_fields)
    left_out: dict[str, str] = {}
    options = {}
    for key, value in raw["algorithm"].items():
        if key == "name" or key in known or key in kept:
            options[key] = value
        else:
            left_out[f"algorithm.{key}"] = f"{name} has no such option"
    raw["algorithm"] = {"name": name, **options}
    if not forwarding_given:
        left_out.update(_forward_what_it_sends(raw, name, cls.parts))
    return Swap(from_method, name, left_out)


def _forward_what_it_sends(raw: dict[str, Any], name: str, parts: tuple[str, ...]) -> dict[str, str]:
    """Leave out the forwarded parts the method does not send (a whole-model method sends none of
    FedSub's); forwarding is off when none is left. Returns what was left out, with why."""
    forwarding = raw.get("forwarding")
    if not isinstance(forwarding, dict) or not forwarding.get("enabled"):
        return {}
    named = forwarding.get("parts", ["prototypes"])
    if not isinstance(named, list):
        return {}   # validation reports it
    kept = [p for p in named if p in parts]
    dropped = ", ".join(str(p) for p in named if p not in parts)
    if kept:
        raw["forwarding"] = {**forwarding, "parts": kept}
        return {"forwarding.parts": f"{name} sends no {dropped}"} if dropped else {}
    raw["forwarding"] = {**forwarding, "enabled": False}
    return {"forwarding.enabled": f"store-carry-forward is off: {name} sends none of the parts "
                                  f"forwarded ({dropped})"}
