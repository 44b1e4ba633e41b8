"""Peers that lie: an attack wraps a device's method, whatever the method and whatever the runtime.

``adversarial(cls, attack, seed)`` returns a subclass of the method's class whose device follows
the method in everything except what the attack changes, so an adversary speaks the method's
protocol (its messages pass every honest check) and the runtimes need no code for it. An
adversary may combine kinds (``kind: [prototype-shift, sign-flip]``); each acts in turn:

- ``label-flip`` (data poisoning): the device trains on flipped labels, every class ``y`` as
  ``C - 1 - y``, or only ``source_class`` as ``target_class``; set when the device is built.
- ``sign-flip`` / ``scale`` (model poisoning): every model float array it shares is multiplied
  by ``-factor`` / ``factor`` (a whole model for the averaging methods, the subnetwork rows for
  FedSub; shared prototypes are left to ``prototype-shift``).
- ``noise``: Gaussian noise of ``noise_std`` added to every model float array it shares.
- ``prototype-shift`` (prototype poisoning, for methods that share class prototypes): each
  shared prototype moves ``shift`` of the way toward the prototype of that class its ``victim``
  sent (``toward: device``: with ``shift`` 1 a copy, so the victim clusters with it), toward the
  mean of the prototypes all its peers sent (``toward: peers``), or toward its own prototype of
  ``target_class`` (``toward: class``). Combined with a model attack, the prototype carries
  poisoned rows into the victims' clusters.
- ``subnetwork-poison`` (FedSub): only the rows of ``target_class``'s subnetwork (its units that
  no other sent class uses; all its units if none) are multiplied by ``-factor``: one class is
  poisoned, the others stay intact.
- ``free-ride``: it never trains; it fuses what others send and shares what it holds.
- ``sybil`` (contacts with forwarding): besides its own share it sends the same (poisoned)
  share as copies "carried" for ``identities`` other devices (their ids, drawn from the seed).
  Where artifacts are not signed (``security.sign_artifacts: false``) a carried copy's origin is
  taken on trust, so a receiver caches it as that device's artifact, and one liar counts as
  several in every fusion that counts peers (a median's majority, a cluster's members); signed,
  each forged copy fails its claimed owner's signature and is refused.
- ``alie``, ``ipm``, ``min-max``, ``min-sum`` (adaptive model poisoning): every model float array
  it shares (prototypes aside) replaced by a model computed from its own honest share and its
  neighbours' newest shares of the same part (FedSub's subnetwork rows unit by unit), aimed at
  the robust rules (``adaptive_attacks.py``, where each is defined).

An attack of the user's own (``attacker.Attacker``, named ``file.py:Class``, ``module:Class`` or
by its ``p2pfed.attacks`` entry point) turns the device's parts, after the shipped kinds it is
combined with, into what it sends.

Model attacks (the adaptive ones too), prototype and subnetwork poisoning, free-riding and the user's attacks act from
``start_round``.
Integer and boolean arrays (masks, indices, counts) are never changed: the messages stay well
formed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from collections.abc import Iterable
from typing import Any

import numpy as np
from torch import nn

from p2pfed.algorithms.adaptive_attacks import ADAPTIVE_KINDS, neighbourhood_poisoned
from p2pfed.algorithms.attacker import Attacker
from p2pfed.algorithms.base import Algorithm, Payload, Received, TrainingWork
from p2pfed.algorithms.payloads import RELAY_KEY
from p2pfed.learning.units import UnitLayer, unit_layers

KINDS = ("label-flip", "sign-flip", "scale", "noise", "prototype-shift", "subnetwork-poison", "free-ride", "sybil",
         *ADAPTIVE_KINDS)
MODEL_KINDS = ("sign-flip", "scale", "noise")
PROTOTYPES = "prototypes"   # the tensor name of shared class prototypes (FedSub, prototype sharing)


@dataclass(frozen=True)
class Attack:
    """One adversary's attack (the scenario's ``adversaries`` entry that chose it)."""

    kinds: tuple[str, ...]
    start_round: int = 0
    factor: float = 1.0
    noise_std: float = 1.0
    source_class: int | None = None
    target_class: int | None = None
    shift: float = 1.0
    toward: str = "peers"
    victim: int | None = None
    identities: tuple[int, ...] = ()   # sybil: the other devices' ids it speaks for (chosen per device)
    z: float | None = None         # alie: the shift in standard deviations (None: from the neighbourhood)
    epsilon: float = 0.1           # ipm: the honest mean's factor, reversed
    deviation: str = "std"         # min-max, min-sum: the perturbation's direction
    liar_share: float = 0.0        # the share of all devices its entry made liars (alie's expected liars)
    custom: tuple[tuple[str, type[Attacker]], ...] = ()   # the user's attacks among ``kinds``, resolved
    options: dict[str, Any] = field(default_factory=dict)   # the user's attacks' options

    @property
    def kind(self) -> str:
        """The attack's label in results (kinds joined by ``+``; a user's attack by its ``name``)."""
        named = dict(self.custom)
        return "+".join(named[k].name if k in named else k for k in self.kinds)

    def flipped(self, labels: np.ndarray, num_classes: int) -> np.ndarray:
        """The training labels as a label-flipping device has them."""
        if self.source_class is None or self.target_class is None:
            return (num_classes - 1 - labels).astype(labels.dtype)
        return np.where(labels == self.source_class, self.target_class, labels).astype(labels.dtype)


def adversarial(cls: type[Algorithm], attack: Attack, seed: int) -> type[Algorithm]:
    """``cls`` with ``attack`` applied to what its devices train and share (see the module)."""
    _check_kinds(cls, attack)
    custom, kinds = dict(attack.custom), attack.kinds

    class Adversary(cls):  # type: ignore[valid-type, misc]
        __doc__ = f"{cls.__name__} under attack: {attack.kind}"
        adversary = attack
        reads_fresh_only = False   # its attacks read the neighbours' newest shares when it shares

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.attack_rng = np.random.default_rng(seed)
            self.attackers = [custom[k](attack.options, np.random.default_rng([seed, j]))
                              for j, k in enumerate(kinds) if k in custom]

        def _acting(self, round: int) -> bool:
            return round >= attack.start_round

        def train(self, round: int) -> TrainingWork:
            if "free-ride" in kinds and self._acting(round):
                return None
            work: TrainingWork = super().train(round)
            return work

        def share(self, round: int) -> Any:
            shared = super().share(round)
            if shared is None or not self._acting(round):
                return shared
            parts = [self._poisoned(p) for p in ([shared] if isinstance(shared, Payload) else shared)]
            for attacker in self.attackers:
                parts = list(attacker.share(self, round, parts))
            if "sybil" in kinds:   # the same share again, as if carried for each stolen identity
                parts += [Payload({**p.meta, RELAY_KEY: {"origin": x, "hops": 2}}, p.tensors)
                          for x in attack.identities for p in parts]
            return parts[0] if isinstance(shared, Payload) and len(parts) == 1 else parts

        def _poisoned(self, payload: Payload) -> Payload:
            return poisoned(payload, attack, self.attack_rng, list(self.cache.values()), self.ctx.model)

        def state_dict(self) -> dict[str, Any]:
            return {**super().state_dict(), "attack_rng": json.dumps(self.attack_rng.bit_generator.state),
                    "attackers": [a.state_dict() for a in self.attackers]}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            super().load_state_dict(state)
            self.attack_rng.bit_generator.state = json.loads(state["attack_rng"])
            for attacker, saved in zip(self.attackers, state.get("attackers", []), strict=True):
                attacker.load_state_dict(saved)

    Adversary.__name__ = Adversary.__qualname__ = f"Adversarial{cls.__name__}"
    return Adversary


def poisoned(payload: Payload, attack: Attack, rng: np.random.Generator, cached: list[Received],
             model: nn.Module) -> Payload:
    """``payload`` as the shipped kinds of ``attack`` send it, each acting in turn; ``cached``: the
    device's neighbours' newest shares, ``model``: its own."""
    tensors = dict(payload.tensors)
    for kind in attack.kinds:
        if kind == "prototype-shift":
            tensors = shifted_prototypes(payload, tensors, attack, cached)
        elif kind == "subnetwork-poison":
            tensors = class_poisoned(payload, tensors, attack, model)
        elif kind in ADAPTIVE_KINDS:
            tensors = neighbourhood_poisoned(
                kind, payload.meta.get("part", "whole"), tensors, cached, skip=(PROTOTYPES,),
                z=attack.z, epsilon=attack.epsilon, deviation=attack.deviation, liar_share=attack.liar_share,
                row_units=lambda shared: subnetwork_row_units(shared, model))
        elif kind in MODEL_KINDS:
            tensors = {name: model_poisoned(kind, array, attack, rng) if name != PROTOTYPES else array
                       for name, array in tensors.items()}
    return Payload(dict(payload.meta), tensors)


def _check_kinds(cls: type[Algorithm], attack: Attack) -> None:
    """A ValueError for a kind no attack has, or one the method cannot be attacked with."""
    custom = dict(attack.custom)
    unknown = [k for k in attack.kinds if k not in KINDS and k not in custom]
    if unknown:
        raise ValueError(f"unknown attack {unknown[0]!r}; known: {', '.join(KINDS)}")
    if "subnetwork-poison" in attack.kinds and "subnetworks" not in getattr(cls, "parts", ()):
        raise ValueError(f"subnetwork-poison needs a method that shares class subnetworks (fedsub), "
                         f"not {getattr(cls, 'name', cls.__name__)}")


def peer_prototype_means(received: Iterable[Received]) -> dict[int, np.ndarray]:
    """Per class, the mean of the prototypes the cached messages carry (one per cached message)."""
    sums: dict[int, list[np.ndarray]] = {}
    for item in received:
        protos = item.payload.tensors.get(PROTOTYPES)
        classes = item.payload.meta.get("classes")
        if protos is None or not isinstance(classes, list):
            continue
        for c, p in zip(classes, protos):
            sums.setdefault(int(c), []).append(np.asarray(p, dtype=np.float64))
    return {c: np.mean(ps, axis=0) for c, ps in sums.items()}


def model_poisoned(kind: str, array: np.ndarray, attack: Attack, rng: np.random.Generator) -> np.ndarray:
    """One shared float array as a model attack of ``kind`` sends it (integer arrays unchanged)."""
    if not np.issubdtype(array.dtype, np.floating):
        return array
    if kind == "noise":
        return (array + rng.normal(0.0, attack.noise_std, array.shape)).astype(array.dtype)
    sign = -1.0 if kind == "sign-flip" else 1.0
    return (array * (sign * attack.factor)).astype(array.dtype)


def shifted_prototypes(payload: Payload, tensors: dict[str, np.ndarray], attack: Attack,
                       cached: Iterable[Received]) -> dict[str, np.ndarray]:
    """Prototypes moved toward the peers' (``cached``: what the device holds), the victim's or
    another class's, class by class."""
    if PROTOTYPES not in tensors:
        return tensors
    classes = list(payload.meta["classes"])
    protos = tensors[PROTOTYPES].astype(np.float64)
    if attack.toward == "class":
        if attack.target_class not in classes:
            return tensors
        goals = {c: protos[classes.index(attack.target_class)] for c in classes}
    elif attack.toward == "device":
        goals = peer_prototype_means(r for r in cached if r.sender == attack.victim)
    else:
        goals = peer_prototype_means(cached)
    moved = protos.copy()
    for j, c in enumerate(classes):
        if c in goals:
            moved[j] = protos[j] + attack.shift * (goals[c] - protos[j])
    return {**tensors, PROTOTYPES: moved.astype(tensors[PROTOTYPES].dtype)}


def unit_bits(packed: np.ndarray, model: nn.Module) -> tuple[np.ndarray, list[tuple[UnitLayer, int, int]]]:
    """A subnetwork share's unit bits (a row per class, a column per unit of every layer) and each
    layer with the span of its units' columns."""
    layers = unit_layers(model)
    sizes = [layer.size for layer in layers]
    ends = np.cumsum(sizes)
    spans = [(layer, int(end - size), int(end)) for layer, size, end in zip(layers, sizes, ends)]
    return np.unpackbits(packed, axis=1, count=sum(sizes)).astype(bool), spans


def subnetwork_row_units(tensors: dict[str, np.ndarray], model: nn.Module) -> dict[str, np.ndarray] | None:
    """Per parameter of a subnetwork share (FedSub's: the rows of the union of its class
    subnetworks, marked in ``units``), the unit each row it sends belongs to; None for a share of
    whole arrays."""
    packed = tensors.get("units")
    if packed is None or packed.ndim != 2:
        return None
    bits, spans = unit_bits(packed, model)
    if packed.shape[1] != -(-spans[-1][2] // 8):   # not this model's units
        return None
    union = np.asarray(bits.any(axis=0))
    return {name: np.flatnonzero(union[a:b]) for layer, a, b in spans for name in layer.params}


def class_poisoned(payload: Payload, tensors: dict[str, np.ndarray], attack: Attack,
                   model: nn.Module) -> dict[str, np.ndarray]:
    """The target class's own rows multiplied by ``-factor`` (FedSub's subnetwork part)."""
    classes = payload.meta.get("classes", [])
    if "units" not in tensors or attack.target_class not in classes:
        return tensors
    bits, spans = unit_bits(tensors["units"], model)
    mine = bits[classes.index(attack.target_class)]
    others = np.asarray(np.delete(bits, classes.index(attack.target_class), axis=0).any(axis=0))
    poisoned = np.asarray(mine & ~others if (mine & ~others).any() else mine)
    union = np.asarray(bits.any(axis=0))
    out = dict(tensors)
    for layer, a, b in spans:
        rows = poisoned[a:b][union[a:b]]   # among the rows sent, in their order
        for name in layer.params:
            array = out[name].copy()
            array[rows] = array[rows] * -attack.factor
            out[name] = array
    return out
