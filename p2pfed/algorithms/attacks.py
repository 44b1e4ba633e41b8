"""Peers that lie: an attack wraps a device's method, whatever the method and whatever the runtime.

``adversarial(cls, attack, seed)`` returns a subclass of the method's class whose device follows
the method in everything except what the attack changes, so an adversary speaks the method's
protocol (its messages pass every honest check) and the runtimes need no code for it:

- ``label-flip`` (data poisoning): the device trains on flipped labels, every class ``y`` as
  ``C - 1 - y``, or only ``source_class`` as ``target_class``; set when the device is built.
- ``sign-flip`` / ``scale`` (model poisoning): every float array it shares is multiplied by
  ``-factor`` / ``factor`` (a whole model for the averaging methods; prototypes and rows for
  FedSub).
- ``noise``: Gaussian noise of ``noise_std`` added to every float array it shares.
- ``free-ride``: it never trains; it fuses what others send and shares what it holds.

Model attacks and free-riding act from ``start_round``. Integer and boolean arrays (masks,
indices, counts) are never changed: the messages stay well formed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from p2pfed.algorithms.base import Algorithm, Payload, TrainingWork

KINDS = ("label-flip", "sign-flip", "scale", "noise", "free-ride")


@dataclass(frozen=True)
class Attack:
    """One adversary's attack (the scenario's ``adversaries`` entry that chose it)."""

    kind: str
    start_round: int = 0
    factor: float = 1.0
    noise_std: float = 1.0
    source_class: int | None = None
    target_class: int | None = None

    def flipped(self, labels: np.ndarray, num_classes: int) -> np.ndarray:
        """The training labels as a label-flipping device has them."""
        if self.source_class is None or self.target_class is None:
            return (num_classes - 1 - labels).astype(labels.dtype)
        return np.where(labels == self.source_class, self.target_class, labels).astype(labels.dtype)


def adversarial(cls: type[Algorithm], attack: Attack, seed: int) -> type[Algorithm]:
    """``cls`` with ``attack`` applied to what its devices train and share (see the module)."""
    if attack.kind not in KINDS:
        raise ValueError(f"unknown attack {attack.kind!r}; known: {', '.join(KINDS)}")

    class Adversary(cls):  # type: ignore[valid-type, misc]
        __doc__ = f"{cls.__name__} under attack: {attack.kind}"
        adversary = attack

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.attack_rng = np.random.default_rng(seed)

        def _acting(self, round: int) -> bool:
            return round >= attack.start_round

        def train(self, round: int) -> TrainingWork:
            if attack.kind == "free-ride" and self._acting(round):
                return None
            work: TrainingWork = super().train(round)
            return work

        def share(self, round: int) -> Any:
            shared = super().share(round)
            if shared is None or attack.kind not in ("sign-flip", "scale", "noise") or not self._acting(round):
                return shared
            if isinstance(shared, Payload):
                return self._poisoned(shared)
            return [self._poisoned(p) for p in shared]

        def _poisoned(self, payload: Payload) -> Payload:
            tensors = {}
            for name, array in payload.tensors.items():
                if not np.issubdtype(array.dtype, np.floating):
                    tensors[name] = array
                elif attack.kind == "noise":
                    noise = self.attack_rng.normal(0.0, attack.noise_std, array.shape)
                    tensors[name] = (array + noise).astype(array.dtype)
                else:
                    sign = -1.0 if attack.kind == "sign-flip" else 1.0
                    tensors[name] = (array * (sign * attack.factor)).astype(array.dtype)
            return Payload(dict(payload.meta), tensors)

        def state_dict(self) -> dict[str, Any]:
            return {**super().state_dict(), "attack_rng": json.dumps(self.attack_rng.bit_generator.state)}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            super().load_state_dict(state)
            self.attack_rng.bit_generator.state = json.loads(state["attack_rng"])

    Adversary.__name__ = Adversary.__qualname__ = f"Adversarial{cls.__name__}"
    return Adversary
