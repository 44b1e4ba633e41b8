"""The contract every method keeps, as checks a user can run on their own class.

In the spirit of scikit-learn's ``parametrize_with_checks``: one suite, run over every shipped
method in p2pfed's tests and over a user's method in theirs::

    from p2pfed.testing import check_algorithm
    check_algorithm(MyMethod, {"momentum": 0.9})        # raises ContractError listing what broke

or, one pytest case per check::

    from p2pfed.testing import parametrize_with_checks

    @parametrize_with_checks([MyMethod])
    def test_my_method(check):
        check()

Each check runs a few rounds of a small federation through the real device loop and intake
(``Federation``). Its data, unless the caller gives a ``dataset``: four devices, three classes,
six features, each class made of two planted Gaussian groups, twelve training samples per class
on every device (``default_dataset``); its model, unless the caller gives one: an MLP with two
hidden layers of 16 units. A ``model`` may be a module built for those inputs or, better, a
factory called as a scenario's ``model.name`` is, ``factory(input_size, num_classes, generator)``
(``input_size`` is ``DATA_FEATURES`` for the default data, ``dataset.num_features`` otherwise).

- ``names_valid``: ``name`` and ``message_kind`` can name a message on the wire
  (``[a-z0-9/_-]{1,64}``);
- ``state_round_trip``: ``load_state_dict(state_dict())`` on a fresh device gives back the same state;
- ``resume_equals_uninterrupted``: three rounds, a checkpoint into fresh devices, three more rounds
  equal six rounds straight — models, evaluations and ``stats()`` — which fails when a method keeps
  state its ``state_dict`` leaves out;
- ``batched_equals_one_at_a_time``: the runtime's batched training, fusion and evaluation equal
  each device's work run alone, to float rounding;
- ``same_seed_same_numbers``: two runs from the same seed give identical numbers, in this process
  (a global random generator breaks it) and in two helper processes with different hash seeds
  (``PYTHONHASHSEED``; iterating a ``set`` of strings breaks it, as it would two ``p2pfed run``s).
  A method class that a new process cannot import (defined in ``__main__`` or in a function) is
  compared in this process only, with a warning;
- ``malformed_payloads_refused``: a peer's share with a tensor missing, reshaped or retyped, or a
  meta field missing or of another type, is refused by ``check`` with ``ArtifactError`` — or, if
  accepted, fused and trained on without error;
- ``parts_declared``: the parts ``share`` names are in the class's ``parts``;
- ``reduced_precision_accepted``: with every float tensor sent as int8 and as float16
  (``engine.precision``), nothing a device shares is dropped, fewer bytes travel than at float32,
  and the models stay finite — a method must not depend on the exact bits it was sent.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from p2pfed.algorithms import Algorithm, ArtifactError, Payload, Received, RunFacts
from p2pfed.algorithms.naming import check_names
from p2pfed.data import FederatedDataset, make_synthetic
from p2pfed.device import merge_parts
from p2pfed.learning.model import ModelFactory, build_user_model
from p2pfed.learning.training import TrainingConfig
from p2pfed.learning.units import has_units
from p2pfed.scenario.randomness import int_seed
from p2pfed.testing.federation import Federation, fuse_once, make_algorithms, train_once
from p2pfed.testing.hash_seeds import HelperError, call_with_hash_seed, in_helper

ROUNDS = 6            # the run a device is told it is in
HIDDEN = (16, 16)
TOLERANCE = 1e-4      # batched against one at a time, after a few rounds
DATA_DEVICES, DATA_CLASSES, DATA_FEATURES = 4, 3, 6     # the default planted data
HASH_SEEDS = ("1", "2")   # of the two helper processes the same-seed check also runs in


def likely_causes(own_generators: str) -> str:
    """Why two runs from one seed differ, for a class whose own generators are ``own_generators``."""
    return ("likely causes: iterating a set (or a dict filled in set order), whose order changes with the "
            "process's hash seed; a global random generator (torch.rand*, np.random.*, random.*) instead of "
            + own_generators)


LIKELY_CAUSES = likely_causes("ctx.rng / ctx.torch_generator")


class ContractError(AssertionError):
    """A method broke its contract; the message names each check that failed and why."""


@dataclass(frozen=True)
class Setup:
    """What the checks build devices from."""

    method: type[Algorithm]
    options: dict[str, Any]
    dataset: FederatedDataset
    model: torch.nn.Module | ModelFactory | None
    seed: int = 0

    def initial_model(self) -> torch.nn.Module | None:
        """The model every device starts from (None: the default MLP); a factory is handed the
        data's input size and number of classes."""
        if self.model is None or isinstance(self.model, torch.nn.Module):
            return self.model
        name = getattr(self.model, "__qualname__", repr(self.model))
        return build_user_model(self.model, name, self.dataset.num_features, self.dataset.num_classes,
                                int_seed(self.seed, "model-init"))

    def algorithms(self) -> list[Algorithm]:
        model = self.initial_model()
        facts = RunFacts(method=self.method.name, rounds=ROUNDS,
                         model_name="mlp" if model is None else type(model).__name__,
                         mlp_layers=len(HIDDEN) + 1 if model is None else None,
                         model_units=model is None or has_units(model))
        self.method.Options.model_validate(self.options, context={"run": facts})
        return make_algorithms(self.method, self.dataset, self.options, seed=self.seed, rounds=ROUNDS,
                               hidden=HIDDEN, model=model, training=TrainingConfig(lr=0.1, batch_size=8))

    def federation(self, *, batched: bool = False, precision: str = "float32") -> Federation:
        return Federation(self.algorithms(), batched=batched, precision=precision)


def default_dataset() -> FederatedDataset:
    """Four devices, three classes with two planted groups each, six features: small and fast."""
    return make_synthetic(num_devices=DATA_DEVICES, num_classes=DATA_CLASSES, num_features=DATA_FEATURES,
                          groups_per_class=2, samples_per_class=12, seed=0)


# -- the checks ----------------------------------------------------------------------------------
def check_names_valid(setup: Setup) -> None:
    try:
        check_names(setup.method)
    except ValueError as exc:
        raise ContractError(str(exc)) from None


def check_state_round_trip(setup: Setup) -> None:
    federation = setup.federation().run(2)
    for i, algo in enumerate(federation.algorithms):
        state = algo.state_dict()
        fresh = setup.algorithms()[i]
        fresh.load_state_dict(copy.deepcopy(state))
        _assert_same(state, fresh.state_dict(), f"device {i}: state_dict after load_state_dict")


def check_resume_equals_uninterrupted(setup: Setup) -> None:
    straight = setup.federation().run(3)
    saved = copy.deepcopy(straight.state_dict())
    straight.run(3, evaluate=True)
    resumed = setup.federation()
    resumed.load_state_dict(saved)
    resumed.run(3, evaluate=True)
    try:
        for i, (a, b) in enumerate(zip(straight.algorithms, resumed.algorithms, strict=True)):
            _assert_same(_parameters(a), _parameters(b),
                         f"device {i}: the model after a resume (is every attribute the method keeps between "
                         "rounds in its state_dict?)")
            _assert_same(a.stats(), b.stats(), f"device {i}: stats() after a resume")
        _assert_same(straight.evaluations(), resumed.evaluations(), "the evaluations after a resume")
    except ContractError:
        if _differs_between_runs(setup):   # not the checkpoint's fault: see same_seed_same_numbers
            raise ContractError("a resumed run differs, but so do two runs from one seed without a resume; "
                                + LIKELY_CAUSES) from None
        raise


def check_batched_equals_one_at_a_time(setup: Setup) -> None:
    alone = setup.federation(batched=False).run(4, evaluate=True)
    together = setup.federation(batched=True).run(4, evaluate=True)
    for i, (a, b) in enumerate(zip(alone.algorithms, together.algorithms, strict=True)):
        for name, value in _parameters(a).items():
            other = _parameters(b)[name]
            if not torch.allclose(value.double(), other.double(), atol=TOLERANCE, rtol=TOLERANCE):
                gap = float((value.double() - other.double()).abs().max())
                raise ContractError(f"device {i}: parameter {name} batched differs from one device at a "
                                    f"time by {gap:.3g} (more than float rounding)")
    np.testing.assert_allclose(alone.evaluations(), together.evaluations(), atol=1e-3,
                               err_msg="evaluations batched against one device at a time")


def check_same_seed_same_numbers(setup: Setup) -> None:
    first, second = same_seed_outcome(setup), same_seed_outcome(setup)
    _assert_same(first, second, f"two runs from one seed, in one process ({LIKELY_CAUSES})")
    uses = [setup.method, setup.model if callable(setup.model) and not isinstance(setup.model, torch.nn.Module)
            else type(setup.model)]
    same_across_hash_seeds(same_seed_outcome, setup, owner=setup.method, uses=uses, causes=LIKELY_CAUSES)


def same_across_hash_seeds(outcome: Callable[[Any], Any], setup: Any, *, owner: type | None,
                           uses: Sequence[object], causes: str) -> None:
    """``outcome(setup)`` computed in two helper processes with different hash seeds must agree
    (``causes``: what the error names when they do not). ``outcome`` and ``setup`` must pickle;
    ``owner``: the user's class under test (None: a shipped one), named in a warning when a new
    process cannot import it, and then the comparison is skipped."""
    if not _importable_elsewhere(setup, owner):
        return
    try:
        outcomes = [call_with_hash_seed(seed, outcome, setup, uses=uses) for seed in HASH_SEEDS]
    except HelperError as exc:
        raise ContractError(f"a run from one seed in a helper process failed: {exc}") from None
    _assert_same(outcomes[0], outcomes[1], f"two runs from one seed, in processes with PYTHONHASHSEED="
                 f"{' and '.join(HASH_SEEDS)} ({causes})")


def same_seed_outcome(setup: Setup) -> dict[str, Any]:
    """What two runs from one seed must agree on: every device's model and evaluation after
    three rounds."""
    federation = setup.federation().run(3, evaluate=True)
    return {"models": [_parameters(a) for a in federation.algorithms], "evaluations": federation.evaluations()}


def _differs_between_runs(setup: Setup) -> bool:
    try:
        _assert_same(same_seed_outcome(setup), same_seed_outcome(setup), "")
    except ContractError:
        return True
    return False


def _importable_elsewhere(setup: Any, owner: type | None) -> bool:
    """Whether a new process can rebuild ``setup`` (the class under test, a model, the data, by
    pickling); if not, says so in a warning naming ``owner``."""
    import pickle
    import warnings

    if in_helper():
        return False   # already one of the two processes
    problem = None
    if owner is not None and owner.__module__ == "__main__":
        problem = "it is defined in __main__"
    else:
        try:
            pickle.dumps(setup)
        except Exception as exc:   # a class in a function, a lambda factory
            problem = f"{type(exc).__name__}: {exc}"
    if problem is not None:
        name = owner.__qualname__ if owner is not None else type(setup).__name__
        warnings.warn(f"{name}: same_seed_same_numbers compared runs in this process only: a new process cannot "
                      f"import the class or what it is built with ({problem}); define them at a module's top "
                      "level to check set order too", stacklevel=3)
    return problem is None


def check_parts_declared(setup: Setup) -> None:
    federation = setup.federation().run(2)
    for algo in federation.algorithms:
        shared = algo.share(federation.next_round)
        for payload in _as_list(shared):
            part = payload.meta.get("part", "whole")
            if part not in setup.method.parts:
                raise ContractError(f"share() names part {part!r}, not in {setup.method.__name__}.parts "
                                    f"{setup.method.parts}")


def check_malformed_payloads_refused(setup: Setup) -> None:
    federation = setup.federation().run(2)
    fresh_receiver = _receiver_factory(setup, federation.algorithms[0])
    sender = federation.algorithms[1]
    shared = merge_parts(_as_list(sender.share(federation.next_round)))
    if not shared:
        return   # a method that sends nothing receives nothing
    for payload in shared:
        for what, bad in _corruptions(payload):
            receiver = fresh_receiver()
            before = dict(receiver.cache)
            item = Received(sender=1, round=2, sent_at=2.0, received_at=2.0, payload=bad)
            try:
                receiver.receive(item)
            except ArtifactError:
                if receiver.cache != before:
                    raise ContractError(f"a payload with {what} was refused but changed the cache") from None
                continue
            except Exception as exc:
                raise ContractError(f"a payload with {what}: check raised {type(exc).__name__}: {exc} "
                                    "(refuse it with ArtifactError)") from None
            try:   # accepted: the device must be able to use it
                fuse_once(receiver, 2, 2.0)
                train_once(receiver, 2)
                receiver.share(2)
            except Exception as exc:
                raise ContractError(f"a payload with {what} passed check but then {type(exc).__name__}: {exc} "
                                    "(check must refuse what fuse cannot use)") from None


def _receiver_factory(setup: Setup, receiver: Algorithm) -> Callable[[], Algorithm]:
    """Copies of ``receiver`` as it stands after its rounds, one per corrupted payload, so that no
    payload sees another's effects. A device that cannot be deep-copied (it holds something that
    does not copy) is rebuilt by running a new federation to the same round instead."""
    try:
        pristine = copy.deepcopy(receiver)
    except Exception:   # any object a user's method holds may refuse to copy
        return lambda: setup.federation().run(2).algorithms[0]
    return lambda: copy.deepcopy(pristine)


def check_reduced_precision_accepted(setup: Setup) -> None:
    sent = {}
    for precision in ("float32", "float16", "int8"):
        federation = setup.federation(precision=precision).run(3, evaluate=True)
        recorder = federation.recorder
        if recorder.messages_dropped:
            raise ContractError(f"at engine.precision {precision}: {recorder.messages_dropped} messages "
                                f"dropped ({dict(recorder.drop_reasons)}); accept restored float32 tensors")
        for i, algo in enumerate(federation.algorithms):
            if not all(bool(torch.isfinite(v).all()) for v in _parameters(algo).values()):
                raise ContractError(f"at engine.precision {precision}: device {i}'s model is not finite")
        sent[precision] = recorder.bytes_sent_total
    if sent["float32"] and not sent["int8"] < sent["float16"] < sent["float32"]:
        raise ContractError(f"bytes sent at float32 / float16 / int8: {sent['float32']} / {sent['float16']} / "
                            f"{sent['int8']}: share float tensors (float32) for the wire precision to apply")


CHECKS: dict[str, Callable[[Setup], None]] = {
    "names_valid": check_names_valid,
    "state_round_trip": check_state_round_trip,
    "resume_equals_uninterrupted": check_resume_equals_uninterrupted,
    "batched_equals_one_at_a_time": check_batched_equals_one_at_a_time,
    "same_seed_same_numbers": check_same_seed_same_numbers,
    "malformed_payloads_refused": check_malformed_payloads_refused,
    "parts_declared": check_parts_declared,
    "reduced_precision_accepted": check_reduced_precision_accepted,
}


# -- entry points ----------------------------------------------------------------------------------
def algorithm_checks(method: type[Algorithm], options: dict[str, Any] | None = None, *,
                     dataset: FederatedDataset | None = None, model: torch.nn.Module | ModelFactory | None = None,
                     ) -> Iterator[tuple[str, Callable[[], None]]]:
    """(name, check) for every check of ``method`` (with ``options``), each runnable alone;
    ``dataset`` and ``model`` replace the planted data and the MLP (a model factory is handed the
    data's input size: the module docstring says more)."""
    setup = Setup(method, dict(options or {}), dataset or default_dataset(), model)
    for name, check in CHECKS.items():
        yield name, cast("Callable[[], None]", lambda check=check: check(setup))


def check_algorithm(method: type[Algorithm], options: dict[str, Any] | None = None, *,
                    dataset: FederatedDataset | None = None,
                    model: torch.nn.Module | ModelFactory | None = None) -> None:
    """Run every check; raise ``ContractError`` naming each one that failed (a method whose
    names cannot travel is stopped at that first check: nothing else could run)."""
    run_contract(method.__name__, algorithm_checks(method, options, dataset=dataset, model=model),
                 stop_after_failing="names_valid")


def run_contract(label: str, checks: Iterable[tuple[str, Callable[[], None]]], *,
                 stop_after_failing: str | None = None) -> None:
    """Run each named check; raise ``ContractError`` naming ``label`` and each check that failed
    (none after ``stop_after_failing``, if that one fails)."""
    failures = []
    for name, check in checks:
        try:
            check()
        except AssertionError as exc:
            failures.append(f"{name}: {exc}")
            if name == stop_after_failing:
                break
    if failures:
        raise ContractError(f"{label} breaks its contract:\n" + "\n".join(failures))


def parametrize_with_checks(methods: Sequence[type[Algorithm] | tuple[type[Algorithm], dict[str, Any]]]) -> Any:
    """A ``pytest.mark.parametrize`` of one case per (method, check); the test calls ``check()``."""
    import pytest

    cases, ids = [], []
    for entry in methods:
        method, options = entry if isinstance(entry, tuple) else (entry, {})
        for name, check in algorithm_checks(method, options):
            cases.append(check)
            ids.append(f"{getattr(method, 'name', method.__name__)}-{name}")
    return pytest.mark.parametrize("check", cases, ids=ids)


# -- helpers ------------------------------------------------------------------------------------------
def _as_list(shared: Payload | Sequence[Payload] | None) -> list[Payload]:
    return [] if shared is None else [shared] if isinstance(shared, Payload) else list(shared)


def _parameters(algo: Algorithm) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in algo.evaluated_model().state_dict().items()}


def _corruptions(payload: Payload) -> Iterator[tuple[str, Payload]]:
    """The payload with one thing wrong, each way a peer might get it wrong."""
    for name, array in payload.tensors.items():
        yield f"tensor {name!r} missing", Payload(dict(payload.meta),
                                                  {k: v for k, v in payload.tensors.items() if k != name})
        grown = np.concatenate([array, array[:1]]) if array.ndim and array.shape[0] else np.zeros((1,), array.dtype)
        yield f"tensor {name!r} reshaped", Payload(dict(payload.meta), {**payload.tensors, name: grown})
        other = np.zeros(array.shape, dtype=np.int64 if array.dtype.kind == "f" else np.float32)
        yield f"tensor {name!r} of dtype {other.dtype}", Payload(dict(payload.meta), {**payload.tensors, name: other})
    for key, value in payload.meta.items():
        if key in ("part", "to"):
            continue
        yield f"meta {key!r} missing", Payload({k: v for k, v in payload.meta.items() if k != key},
                                               dict(payload.tensors))
        wrong: Any = "x" if not isinstance(value, str) else -1
        yield f"meta {key!r} = {wrong!r}", Payload({**payload.meta, key: wrong}, dict(payload.tensors))


def _assert_same(a: Any, b: Any, what: str) -> None:
    """Exactly equal, through dicts, lists, tensors, arrays and floats (NaN equal to NaN)."""
    problem = _difference(a, b, "")
    if problem is not None:
        raise ContractError(f"{what}: differs at {problem}")


def _difference(a: Any, b: Any, at: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{at or 'top'} (keys {sorted(map(str, set(a) ^ set(b)))})"
        for key in a:
            found = _difference(a[key], b[key], f"{at}.{key}")
            if found:
                return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{at} (length {len(a)} vs {len(b)})"
        for i, (x, y) in enumerate(zip(a, b)):
            found = _difference(x, y, f"{at}[{i}]")
            if found:
                return found
        return None
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        same = a.shape == b.shape and a.dtype == b.dtype and bool(
            torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                                  and torch.equal(a.nan_to_num(), b.nan_to_num())))
        return None if same else at
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return None if a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f") else at
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    return None if type(a) is type(b) and a == b else f"{at} ({a!r} vs {b!r})"


__all__ = ["CHECKS", "ContractError", "DATA_CLASSES", "DATA_DEVICES", "DATA_FEATURES", "algorithm_checks",
           "check_algorithm", "default_dataset", "parametrize_with_checks"]
