"""Every shipped method keeps the contract a user's method is held to (``p2pfed.testing``), and the
suite catches what it is there to catch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from p2pfed.algorithms import ALGORITHMS, Algorithm, FusionWork, Payload, Received, TrainingWork
from p2pfed.algorithms.model_payload import averaging_job, checked_tensors, model_payload, parameter_shapes
from p2pfed.testing import ContractError, check_algorithm, parametrize_with_checks

# Options that let a six-round run reach each method's later phases.
OPTIONS = {"fedhome": {"fine_tune_rounds": 2}, "fedclar": {"cluster_round": 1, "fine_tune_rounds": 1},
           "safl": {"target_rate": 0.2}, "fedpews": {"warmup_rounds": 2}, "fedpews-fixed": {"warmup_rounds": 2},
           "fedali": {"prototypes": 4}, "fedsub": {"kmeans_n_init": 1},
           "lg-fedavg": {"global_layers": 2, "fedavg_rounds": 2}}   # the head alone: too small for the precision check


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@parametrize_with_checks([(ALGORITHMS[name], OPTIONS.get(name, {})) for name in sorted(ALGORITHMS)])
def test_shipped_method_keeps_the_contract(check):
    check()


class ForgetfulMomentum(Algorithm):
    """Gossip averaging whose fusion keeps a momentum of the averaged step — and forgets to put it
    in ``state_dict``: a resumed run restarts it at zero."""

    name = "test-forgetful-momentum"

    def __init__(self, ctx, options) -> None:
        super().__init__(ctx, options)
        self.shapes = parameter_shapes(ctx.model)
        self.velocity = {n: torch.zeros(s) for n, s in self.shapes.items()}

    def share(self, round: int) -> Payload:
        return model_payload(self.ctx.model, self.ctx.num_samples)

    def check(self, payload: Payload) -> dict[str, np.ndarray]:
        return checked_tensors(payload, self.shapes)

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        before = {n: p.detach().clone() for n, p in self.ctx.model.named_parameters()}
        job = averaging_job(self.ctx.model, 1.0, [(r.parsed, 1.0) for r in fresh])

        def momentum() -> None:
            with torch.no_grad():
                for n, p in self.ctx.model.named_parameters():
                    self.velocity[n] = 0.9 * self.velocity[n] + (p - before[n])
                    p.add_(0.5 * self.velocity[n])
        job.then.append(momentum)
        return job


class RememberedMomentum(ForgetfulMomentum):
    name = "test-remembered-momentum"

    def state_dict(self):
        return {**super().state_dict(), "velocity": {n: v.clone() for n, v in self.velocity.items()}}

    def load_state_dict(self, state) -> None:
        super().load_state_dict(state)
        self.velocity = {n: v.clone() for n, v in state["velocity"].items()}


def test_the_suite_catches_state_a_method_forgot_to_save():
    with pytest.raises(ContractError, match="resume_equals_uninterrupted"):
        check_algorithm(ForgetfulMomentum)
    check_algorithm(RememberedMomentum)


class Trusting(Algorithm):
    """Averages whatever arrives without checking it: a reshaped tensor crashes its fusion."""

    name = "test-trusting"

    def share(self, round: int) -> Payload:
        return model_payload(self.ctx.model, self.ctx.num_samples)

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        return averaging_job(self.ctx.model, 1.0, [(r.payload.tensors, 1.0) for r in fresh])


class Unseeded(Algorithm):
    """Draws its shuffling from torch's global generator instead of the device's stream."""

    name = "test-unseeded"

    def train(self, round: int) -> TrainingWork:
        ctx = self.ctx
        order = torch.randperm(ctx.num_samples)
        return self.training_job(x=ctx.x_train[order], y=ctx.y_train[order])


def test_the_suite_catches_unchecked_payloads_and_unseeded_randomness():
    with pytest.raises(ContractError, match="malformed_payloads_refused"):
        check_algorithm(Trusting)
    with pytest.raises(ContractError, match="same_seed_same_numbers"):
        check_algorithm(Unseeded)


TAKE_ANY_MODEL = ["gossip-avg", "fedprox", "ditto", "fedclar", "fedper", "fedrep", "fedproto", "protohar", "fedali",
                  "fedhome", "local", "fedbn"]


@pytest.mark.parametrize("name", TAKE_ANY_MODEL)
def test_methods_that_take_any_model_keep_the_contract_on_a_model_of_the_users_own(name):
    """The dropout MLP of examples/: a module of the user's own with ``features`` and a ``head``."""
    import sys

    from tests.conftest import ROOT
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from dropout_mlp import make_model
    finally:
        sys.path.remove(str(ROOT / "examples"))
    model = make_model(6, 3, torch.Generator().manual_seed(0), hidden=16, dropout=0.2)
    check_algorithm(ALGORITHMS[name], OPTIONS.get(name, {}), model=model)


class SetOrderedGossip(Algorithm):
    """Gossip averaging that gives the peer first in a set of peer names half the weight: the
    same order in one process, another in a process with another hash seed."""

    def share(self, round: int) -> Payload:
        return model_payload(self.ctx.model, self.ctx.num_samples)

    def check(self, payload: Payload) -> dict[str, np.ndarray]:
        return checked_tensors(payload, parameter_shapes(self.ctx.model))

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        by_name = {f"peer-{r.sender}": r for r in fresh}
        favourite = next(iter(set(by_name)), None)
        members = [(r.parsed, 2.0 if name == favourite else 1.0) for name, r in sorted(by_name.items())]
        return averaging_job(self.ctx.model, 1.0, members)


def test_the_suite_catches_a_fusion_in_set_order_and_names_the_likely_causes():
    with pytest.raises(ContractError, match="same_seed_same_numbers") as err:
        check_algorithm(SetOrderedGossip)
    message = str(err.value)
    assert "PYTHONHASHSEED" in message and "iterating a set" in message and "global random generator" in message


def test_a_method_drawing_from_a_global_generator_is_not_blamed_on_its_state_dict():
    with pytest.raises(ContractError) as err:
        check_algorithm(Unseeded)
    assert "global random generator" in str(err.value)
    assert "state_dict" not in str(err.value)


INPUT_SIZES: list[int] = []


def small_model(input_size: int, num_classes: int, generator: torch.Generator) -> torch.nn.Module:
    """A model factory of a user's own, built for the data's inputs."""
    INPUT_SIZES.append(input_size)
    model = torch.nn.Sequential(torch.nn.Linear(input_size, 32), torch.nn.ReLU(), torch.nn.Linear(32, num_classes))
    for p in model.parameters():
        torch.nn.init.uniform_(p, -0.3, 0.3, generator=generator)
    return model


def test_the_contract_hands_a_model_factory_the_input_size():
    from p2pfed.data import make_synthetic
    from p2pfed.testing.checks import DATA_FEATURES

    check_algorithm(ALGORITHMS["gossip-avg"], model=small_model)
    assert set(INPUT_SIZES) == {DATA_FEATURES}
    INPUT_SIZES.clear()
    nine = make_synthetic(num_devices=3, num_classes=2, num_features=9, samples_per_class=8, seed=1)
    check_algorithm(ALGORITHMS["gossip-avg"], dataset=nine, model=small_model)
    assert set(INPUT_SIZES) == {9}
