"""Adaptive attacks (ALIE, inner-product manipulation, min-max, min-sum): each sends what its
definition gives on a hand-checkable neighbourhood, computes it from the liar's own neighbourhood
only, keeps the attacks' contract, moves the honest devices' models more than random noise of the
same norm does, under plain averaging and under the median it aims at, and gets past a defence
that holds against a naive attack."""

from __future__ import annotations

from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest
import torch

from p2pfed.algorithms import Attacker, Payload
from p2pfed.algorithms.adaptive_attacks import (aligned, alie, alie_z, ipm, liars_among, min_max,
                                                neighbourhood_poisoned, spread)
from p2pfed.algorithms.attacks import Attack, adversarial
from p2pfed.algorithms.payloads import Received
from p2pfed.data.synthetic import make_synthetic
from p2pfed.engine.runner import run_scenario
from p2pfed.learning.training import TrainingConfig
from p2pfed.scenario.build import adversary_map, build_algorithm
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.loader import load_scenario, method_class
from p2pfed.testing import check_attack
from p2pfed.testing.federation import Federation, make_algorithms

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "synthetic-small.yaml"
KINDS = ("alie", "ipm", "min-max", "min-sum")


def test_each_attack_is_its_definition_on_a_tiny_neighbourhood():
    """Three honest vectors on a line (mean 3, standard deviation 2 along x), and four at the
    corners of a square, where the answers are worked out by hand."""
    line = np.array([[1.0, 0.0], [3.0, 0.0], [5.0, 0.0]])
    assert np.allclose(alie(line, 1.5), [0.0, 0.0])              # 3 - 1.5 * 2
    assert np.allclose(ipm(line, 0.5), [-1.5, 0.0])              # -0.5 * 3
    # min-max: μ - γσ = 3 - 2γ stays within 4 (the honest spread 1..5) of the far end 5 while γ <= 1
    assert np.allclose(min_max(line, "std"), [1.0, 0.0], atol=1e-4)
    # min-sum: any γ > 0 adds 12γ² to the sum of squares 8, already the middle vector's: γ = 0
    assert np.allclose(min_max(line, "std", objective="sum"), [3.0, 0.0], atol=1e-4)
    square = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0]])
    # μ = (1, 1), σ = (2/√3)(1, 1): both bounds are first met at μ - γσ = (0, 0), a corner
    for objective in ("max", "sum"):
        assert np.allclose(min_max(square, "std", objective=objective), [0.0, 0.0], atol=1e-4)
    assert np.allclose(min_max(square, "unit-vec"), [0.0, 0.0], atol=1e-4)   # γ = √2 along (1, 1)/√2
    # ALIE's z: n = 12 devices of which m = 3 lie need s = ⌊12/2 + 1⌋ - 3 = 4 supporters
    assert alie_z(12, 3) == pytest.approx(NormalDist().inv_cdf(5 / 9))
    assert liars_among(12, 0.25) == 3 and liars_among(4, 0.1) == 1


def _received(sender: int, tensors: dict[str, np.ndarray], part: str = "whole") -> Received:
    return Received(sender=sender, round=0, sent_at=0.0, received_at=0.0,
                    payload=Payload({"part": part, "num_samples": 1}, tensors))


def test_the_liar_sees_only_its_own_share_and_its_neighbours_of_the_same_part_and_shape():
    own = {"w": np.array([1.0, 0.0], dtype=np.float32), "units": np.array([1, 2], dtype=np.uint8)}
    cached = [_received(1, {"w": np.array([3.0, 0.0], dtype=np.float32)}),
              _received(2, {"w": np.array([5.0, 0.0], dtype=np.float32)}),
              _received(3, {"w": np.array([99.0, 9.0, 9.0], dtype=np.float32)}),     # another shape: left out
              _received(4, {"w": np.array([-99.0, 0.0], dtype=np.float32)}, part="prototypes")]
    sent = neighbourhood_poisoned("ipm", "whole", own, cached, epsilon=0.5)
    assert np.allclose(sent["w"], [-1.5, 0.0]) and sent["w"].dtype == np.float32
    assert np.array_equal(sent["units"], own["units"])                           # integer arrays stay
    assert np.array_equal(neighbourhood_poisoned("alie", "whole", {"p": own["w"]}, cached, skip=("p",))["p"], own["w"])


def test_subnetwork_rows_are_compared_unit_by_unit_and_missing_ones_left_out():
    """The liar sends units 0 and 2 of a layer, a neighbour units 2 and 3: the neighbour counts at
    unit 2 only, and the statistics at unit 0 are the liar's alone (deviation 0)."""
    def units(tensors):
        return {"w": tensors["at"].astype(np.int64)} if "at" in tensors else None
    own = {"w": np.array([[1.0, 1.0], [3.0, 3.0]]), "at": np.array([0, 2])}
    theirs = {"w": np.array([[5.0, 7.0], [9.0, 9.0]]), "at": np.array([2, 3])}
    row = aligned(theirs, own, ["w"], units(own), units)
    assert row is not None and np.isnan(row[:2]).all() and np.array_equal(row[2:], [5.0, 7.0])
    elsewhere = {"w": theirs["w"], "at": np.array([4, 5])}
    assert aligned(elsewhere, own, ["w"], units(own), units) is None   # nothing in common
    honest = np.vstack([own["w"].ravel(), row])
    assert np.allclose(spread(honest), [0.0, 0.0, np.sqrt(2.0), np.sqrt(8.0)])
    sent = neighbourhood_poisoned("alie", "subnetworks", own, [_received(1, theirs)], z=1.0, row_units=units)
    assert np.allclose(sent["w"], [[1.0, 1.0], [4.0 - np.sqrt(2.0), 5.0 - np.sqrt(8.0)]])
    assert np.array_equal(sent["at"], own["at"])


def test_on_fedsub_each_adaptive_attack_reaches_the_honest_devices():
    """A real FedSub run with two liars of twelve under the median: each attack's subnetwork rows
    are computed from its neighbours' rows of the same units, so the honest devices end elsewhere
    than with liars that send their honest share."""
    def honest(kind: str) -> float:
        return _honest_f1(f"[{{kind: {kind}, fraction: 0.2}}]", FEDSUB_MEDIAN)
    honest_liars = honest(f"{Path(__file__).resolve()}:Honest")
    for kind in KINDS:
        assert honest(kind) != honest_liars, kind


class Honest(Attacker):
    """A liar that sends what its method would: the reference the attacks are compared with."""

    name = "honest"


def test_scenario_entries_carry_the_attacks_parameters_and_refuse_the_ones_that_mean_nothing():
    sets = ["algorithm.name=gossip-avg", "adversaries=[{kind: alie, fraction: 0.25, z: 1.5}, "
            "{kind: min-max, devices: [0], deviation: sign}]"]
    chosen = adversary_map(load_scenario(SCENARIO, sets), 12, 4)
    assert chosen[0].kind == "min-max" and chosen[0].deviation == "sign"
    alie_ones = [a for a in chosen.values() if a.kind == "alie"]
    assert len(alie_ones) == 3 and all(a.z == 1.5 and a.liar_share == 0.25 for a in alie_ones)
    for entry, key in [("{kind: ipm, devices: [0], z: 1}", "z"),
                       ("{kind: alie, devices: [0], epsilon: 2}", "epsilon"),
                       ("{kind: noise, devices: [0], deviation: sign}", "deviation")]:
        with pytest.raises(ScenarioError, match=key):
            load_scenario(SCENARIO, ["algorithm.name=gossip-avg", f"adversaries=[{entry}]"])
    loaded = load_scenario(SCENARIO, ["algorithm.name=gossip-avg",
                                      "adversaries=[{kind: ipm, devices: [2], epsilon: 2}]"])
    device = build_algorithm(loaded, loaded.federation, 2)
    assert device.adversary.kind == "ipm" and device.adversary.epsilon == 2


@pytest.mark.parametrize("kind", KINDS)
def test_each_adaptive_attack_keeps_the_attacks_contract(kind):
    check_attack(kind)


DATA = make_synthetic(num_devices=8, num_classes=3, num_features=6, groups_per_class=2, samples_per_class=12, seed=0)
LIARS, ROUNDS = (0, 1), 6


class SameNormNoise(Attacker):
    """Random noise with the norm of the shift that the adaptive attack ``options['kind']`` would
    make: what the attack's direction is worth is what it moves beyond this."""

    name = "same-norm-noise"

    def share(self, device, round, parts):
        out = []
        for p in parts:
            aimed = neighbourhood_poisoned(self.options["kind"], "whole", dict(p.tensors), device.cache.values(),
                                           liar_share=len(LIARS) / len(DATA.devices))
            noisy = {}
            for name, a in p.tensors.items():
                r = self.rng.standard_normal(a.shape)
                noisy[name] = (a + r * np.linalg.norm(aimed[name] - a) / np.linalg.norm(r)).astype(a.dtype)
            out.append(Payload(dict(p.meta), noisy))
        return out


def _honest_models(robust: str, attack: Attack | None) -> list[torch.Tensor]:
    """The honest devices' models after a short gossip-avg run, devices 0 and 1 lying with ``attack``."""
    base = method_class("gossip-avg")

    def build(cls):
        return make_algorithms(cls, DATA, {"robust": robust}, seed=0, rounds=ROUNDS, hidden=(16, 16),
                               training=TrainingConfig(lr=0.1, batch_size=8))
    algos = build(base)
    if attack is not None:
        liars = build(adversarial(base, attack, 7))
        algos = [liars[i] if i in LIARS else a for i, a in enumerate(algos)]
    Federation(algos).run(ROUNDS)
    return [torch.cat([p.detach().flatten() for p in a.ctx.model.parameters()])
            for i, a in enumerate(algos) if i not in LIARS]


@pytest.mark.parametrize("robust", ["none", "median"])
def test_each_adaptive_attack_moves_honest_models_more_than_noise_of_the_same_norm(robust):
    """Eight devices, two lying, six rounds: each attack moves the honest devices' models away
    from where a run without liars leaves them clearly farther than noise of the norm of its own
    shift does (the inner-product manipulation only under plain averaging: under the median, its
    reversed mean is one more outlier)."""
    clean = _honest_models(robust, None)

    def moved(attack: Attack) -> float:
        return float(np.mean([float((m - c).norm()) for m, c in zip(_honest_models(robust, attack), clean)]))
    share = len(LIARS) / len(DATA.devices)
    for kind in KINDS if robust == "none" else ("alie", "min-max", "min-sum"):
        aimed = moved(Attack((kind,), liar_share=share))
        noise = moved(Attack(("same-norm-noise",), custom=(("same-norm-noise", SameNormNoise),),
                             options={"kind": kind}))
        assert aimed > 1.3 * noise, (kind, aimed, noise)


GOSSIP_MULTI_KRUM = ("algorithm.name=gossip-avg", "rounds=8", "algorithm.robust=multi-krum", "algorithm.byzantine=3")
FEDSUB_MEDIAN = ("algorithm.name=fedsub", "rounds=6", "algorithm.robust=median", "seed=1")


def _honest_f1(adversaries: str, settings: tuple[str, ...] = GOSSIP_MULTI_KRUM) -> float:
    """The honest devices' final F1 of a real run of ``SCENARIO`` with ``settings`` and ``adversaries``."""
    sets = [*settings, f"adversaries={adversaries}"]
    summary = run_scenario(load_scenario(SCENARIO, sets), progress=False)
    assert summary is not None
    return summary["adversaries"]["honest_f1_mean"]


def test_alie_and_min_sum_get_past_multi_krum_that_sets_sign_flipped_models_aside():
    """Three of twelve devices lie, multi-Krum told of three: sign-flipped models are far from the
    honest ones and never selected, so the honest devices keep their F1; ALIE's and min-sum's
    models sit inside the honest spread, are selected, and cost the honest devices F1."""
    naive = _honest_f1("[{kind: sign-flip, fraction: 0.25, factor: 3}]")
    assert _honest_f1("[{kind: alie, fraction: 0.25}]") < naive - 0.05
    assert _honest_f1("[{kind: min-sum, fraction: 0.25}]") < naive - 0.05
