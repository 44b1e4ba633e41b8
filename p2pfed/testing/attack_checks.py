"""The contract every attack keeps, the shipped kinds' and a user's alike, as checks a user can run.

Like the methods' (``check_algorithm``), one suite over a small federation run through the real
device loop and intake: four devices of a method (``gossip-avg`` unless the caller names another)
on the planted data, device 0 the adversary::

    from p2pfed.testing import check_attack
    check_attack(MyAttack, {"std": 0.1})            # raises ContractError listing what broke

- ``state_round_trip``: the adversary's ``load_state_dict(state_dict())`` on a fresh device gives
  back the same state, and the two then share the same numbers;
- ``same_seed_same_numbers``: two runs from the same seed send the same bytes, round by round, in
  this process (a global random generator breaks it: draw from ``self.rng``) and in two helper
  processes with different hash seeds (``PYTHONHASHSEED``; iterating a ``set`` of strings breaks
  it, as it would two ``p2pfed run``s), as the methods' contract compares them. An attack class a
  new process cannot import is compared in this process only, with a warning;
- ``messages_pass_honest_checks``: with artifacts signed, as a run signs them by default, every
  message the adversary sends is taken in by its honest neighbours: none is dropped, so the
  attack speaks the method's protocol (a forged origin, a malformed tensor or a non-finite value
  would be refused and the attack would measure nothing).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from p2pfed.algorithms import Algorithm, Attacker
from p2pfed.algorithms.attacks import KINDS, Attack, adversarial
from p2pfed.data import FederatedDataset
from p2pfed.learning.training import TrainingConfig
from p2pfed.scenario.loader import method_class
from p2pfed.scenario.randomness import int_seed
from p2pfed.testing.checks import (HIDDEN, ROUNDS, ContractError, _assert_same, default_dataset, likely_causes,
                                   run_contract, same_across_hash_seeds)
from p2pfed.testing.federation import Federation, make_algorithms
from p2pfed.transport.signing import Signing

ADVERSARY = 0
LIKELY_CAUSES = likely_causes("self.rng")


@dataclass(frozen=True)
class AttackSetup:
    """What the checks build the federation from: the attack (a user's class or a shipped kind)."""

    attack: type[Attacker] | str
    options: dict[str, Any]
    method: str
    dataset: FederatedDataset
    seed: int = 0

    def algorithms(self) -> list[Algorithm]:
        base = method_class(self.method)
        if isinstance(self.attack, str):
            spec = Attack((self.attack,))
        else:
            spec = Attack((self.attack.name,), custom=((self.attack.name, self.attack),), options=self.options)
        cls = adversarial(base, spec, int_seed(self.seed, "attack", ADVERSARY))
        honest = self._build(base)
        return [self._build(cls)[ADVERSARY], *honest[1:]]

    def _build(self, cls: type[Algorithm]) -> list[Algorithm]:
        return make_algorithms(cls, self.dataset, seed=self.seed, rounds=ROUNDS, hidden=HIDDEN,
                               training=TrainingConfig(lr=0.1, batch_size=8))

    def federation(self, signed: bool = False) -> Federation:
        algos = self.algorithms()
        return Federation(algos, signing=Signing.simulated(self.seed, len(algos)) if signed else None)


def check_state_round_trip(setup: AttackSetup) -> None:
    federation = setup.federation().run(2)
    adversary = federation.algorithms[ADVERSARY]
    state = adversary.state_dict()
    fresh = setup.algorithms()[ADVERSARY]
    fresh.load_state_dict(copy.deepcopy(state))
    _assert_same(state, fresh.state_dict(), "the adversary's state_dict after load_state_dict")
    _assert_same(_tensors(adversary.share(2)), _tensors(fresh.share(2)),
                 "what the adversary and its restored copy share next (is all the attack's state in state_dict?)")


def check_same_seed_same_numbers(setup: AttackSetup) -> None:
    if sent_bytes(setup) != sent_bytes(setup):
        raise ContractError(f"two runs from one seed, in one process, send different bytes ({LIKELY_CAUSES})")
    owner = None if isinstance(setup.attack, str) else setup.attack
    same_across_hash_seeds(sent_bytes, setup, owner=owner, uses=[] if owner is None else [owner], causes=LIKELY_CAUSES)


def sent_bytes(setup: AttackSetup) -> list[list[bytes]]:
    """What the adversary sends in three rounds, message by message, as encoded for the wire."""
    federation = setup.federation()
    return [[out.data for out in federation.round()[ADVERSARY]] for _ in range(3)]


def check_messages_pass_honest_checks(setup: AttackSetup) -> None:
    federation = setup.federation(signed=True).run(3)
    drops = dict(federation.recorder.drop_reasons)
    if drops:
        raise ContractError(f"honest devices refused messages ({drops}); an attack's messages must pass the "
                            "receivers' checks (the method's tensors and meta, its owner's signature)")
    if not all(ADVERSARY in a.cache for a in federation.algorithms[1:]):
        raise ContractError("the adversary's messages did not reach its honest neighbours' caches")


CHECKS: dict[str, Callable[[AttackSetup], None]] = {
    "state_round_trip": check_state_round_trip,
    "same_seed_same_numbers": check_same_seed_same_numbers,
    "messages_pass_honest_checks": check_messages_pass_honest_checks,
}


def attack_checks(attack: type[Attacker] | str, options: dict[str, Any] | None = None, *,
                  method: str = "gossip-avg", dataset: FederatedDataset | None = None
                  ) -> Iterator[tuple[str, Callable[[], None]]]:
    """(name, check) for every check of ``attack`` (a user's ``Attacker`` class with ``options``,
    or a shipped kind's name) against ``method``, each runnable alone."""
    if isinstance(attack, str) and attack not in KINDS:
        raise ValueError(f"unknown attack {attack!r}; a shipped kind is one of {', '.join(KINDS)}")
    setup = AttackSetup(attack, dict(options or {}), method, dataset or default_dataset())
    for name, check in CHECKS.items():
        yield name, cast("Callable[[], None]", lambda check=check: check(setup))


def check_attack(attack: type[Attacker] | str, options: dict[str, Any] | None = None, *,
                 method: str = "gossip-avg", dataset: FederatedDataset | None = None) -> None:
    """Run every check; raise ``ContractError`` naming each one that failed."""
    label = attack if isinstance(attack, str) else attack.__name__
    run_contract(label, attack_checks(attack, options, method=method, dataset=dataset))


def _tensors(shared: Any) -> list[dict[str, Any]]:
    parts = [] if shared is None else shared if isinstance(shared, list) else [shared]
    return [dict(p.tensors) for p in parts]
