"""The robust rules from the decentralized literature beside median, trimmed mean, Krum and clip:
multi-Krum, self-centred clipping with ClippedGossip's radius, and the geometric median. Each is
its rule on a tiny example, holds where plain averaging does not, and is usable wherever
``algorithm.robust`` is (gossip averaging and its family, FedSub's row fusion, SAFL's stage two)."""

from __future__ import annotations

import tracemalloc
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from p2pfed.engine.runner import run_scenario
from p2pfed.learning.robust_fusion import (combine, gossip_radius, krum_choice, masked_combine, set_aside,
                                          squared_distances)
from p2pfed.scenario.loader import load_scenario

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "synthetic-small.yaml"
NEW_RULES = ("multi-krum", "clipped-gossip", "geometric-median")


def test_multi_krum_averages_the_n_minus_f_best_scored():
    """Five models on a line, one far off: with f = 1 each score sums the squared distances to
    the n - f - 2 = 2 nearest others (0: 1 + 4, 1: 1 + 1, 2: 1 + 1, 3: 1 + 4, the liar: huge), and
    the n - f = 4 best are averaged."""
    rows, ones = np.array([[0.0], [1.0], [2.0], [3.0], [100.0]]), np.ones(5)
    assert np.allclose(combine(rows, ones, "multi-krum", byzantine=1), [1.5])
    assert set_aside(rows, "multi-krum", byzantine=1) == 1
    assert np.allclose(combine(rows, ones, "krum", byzantine=1), [1.0])   # Krum's single choice: the first best


def _krum_with_the_whole_difference_array(rows: np.ndarray, byzantine: int, select: int) -> np.ndarray:
    """Krum's choice as it was computed before: every pair's differences held at once."""
    n = len(rows)
    f = min(byzantine, max((n - 3) // 2, 0))
    squared = np.sum((rows[:, None, :] - rows[None, :, :]) ** 2, axis=2)
    np.fill_diagonal(squared, np.inf)
    scores = np.sort(squared, axis=1)[:, :min(max(n - f - 2, 1), n - 1)].sum(axis=1) if n > 1 else np.zeros(1)
    return np.argsort(scores, kind="stable")[:min(select, n)]


def test_krums_distances_are_the_whole_difference_arrays_to_the_last_bit_ties_included():
    """Random models of both float widths and many sizes, a third of them small integers (equal
    distances, repeated models: ties): the same distances, bit for bit, and the same choice."""
    rng = np.random.default_rng(5)
    for trial in range(600):
        n, width = int(rng.integers(1, 13)), int(rng.integers(1, 700))
        rows = rng.normal(size=(n, width)) * rng.choice([1e-3, 1.0, 1e3])
        if trial % 3 == 0:
            rows = rng.integers(-1, 2, size=(n, width)).astype(float)
            rows[rng.integers(0, n)] = rows[0]
        rows = rows.astype(np.float32 if trial % 2 else np.float64)
        whole = np.sum((rows[:, None, :] - rows[None, :, :]) ** 2, axis=2)
        assert whole.dtype == squared_distances(rows).dtype and np.array_equal(whole, squared_distances(rows))
        byzantine, select = int(rng.integers(0, 4)), int(rng.integers(1, n + 1))
        assert np.array_equal(krum_choice(rows, byzantine, select),
                              _krum_with_the_whole_difference_array(rows, byzantine, select))


def test_krums_memory_grows_as_the_models_not_as_their_pairs():
    """24 models of 50,000 values: Krum's scoring holds at most two copies of the models at a time,
    where all pairs' differences would be 24 copies."""
    rows = np.random.default_rng(0).normal(size=(24, 50_000))
    tracemalloc.start()
    try:
        krum_choice(rows, byzantine=2, select=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2.5 * rows.nbytes, peak / rows.nbytes


def test_clipped_gossip_clips_the_f_farthest_peers_to_the_next_ones_distance():
    """The own model at the origin, peers at distances 3, 4 and 10: with f = 1 the radius is 4 and
    only the far peer is pulled in, onto (4, 0); with f = 2 it is 3."""
    rows, ones = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0], [10.0, 0.0]]), np.ones(4)
    assert gossip_radius(rows, 1) == 4.0 and gossip_radius(rows, 2) == 3.0 and gossip_radius(rows, 9) == 3.0
    assert np.allclose(combine(rows, ones, "clipped-gossip", byzantine=1), [7 / 4, 1.0])
    assert np.allclose(combine(rows, ones, "clipped-gossip", byzantine=2), [6 / 4, 3 / 4])
    assert set_aside(rows, "clipped-gossip", byzantine=1) == 1 and set_aside(rows, "clipped-gossip", byzantine=2) == 2
    assert np.allclose(combine(rows[:1], ones[:1], "clipped-gossip"), rows[0])   # no peer: the own model


def test_the_geometric_median_ignores_how_far_a_liar_goes():
    """Three of five models at 0: the geometric median is there, the mean at 20; a liar sent a
    thousand times farther moves it no more."""
    rows = np.array([[0.0], [0.0], [0.0], [1.0], [100.0]])
    assert abs(combine(rows, np.ones(5), "geometric-median")[0]) < 1e-3
    farther = rows.copy()
    farther[4] = 1e5
    assert abs(combine(farther, np.ones(5), "geometric-median")[0]) < 1e-3
    square = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    assert np.allclose(combine(square, np.ones(4), "geometric-median"), [0.0, 0.0])


@pytest.mark.parametrize("rule", NEW_RULES)
def test_each_new_rule_combines_pruned_sub_models_over_the_holders_of_each_element(rule):
    """SAFL's stage two and FedSub's row groups go through the same combination per group of
    elements with the same holders: a far liar holding the first element with three honest
    models is resisted there, and an element only the own model holds keeps its value."""
    values = np.array([[1.0, 3.0], [1.1, 0.0], [0.9, 0.0], [1.05, 0.0], [-90.0, 0.0]])
    holds = np.array([[1, 1], [1, 0], [1, 0], [1, 0], [1, 0]], dtype=bool)
    out, _, offered = masked_combine(values, holds, np.ones(5), rule, byzantine=1)
    assert abs(out[0] - 1.0) < 0.3 and out[1] == 3.0 and offered == 4


ATTACK = "[{kind: sign-flip, fraction: 0.25, factor: 3}]"
GOSSIP = ["algorithm.name=gossip-avg", "rounds=8", "algorithm.byzantine=3"]


@lru_cache(maxsize=None)
def _honest_f1(robust: str, adversaries: str) -> float:
    summary = run_scenario(load_scenario(SCENARIO, [*GOSSIP, f"algorithm.robust={robust}",
                                                    f"adversaries={adversaries}"]), progress=False)
    assert summary is not None
    return summary["adversaries"]["honest_f1_mean"] if adversaries != "[]" else summary["final"]["f1_macro_mean"]


@pytest.mark.parametrize("rule", NEW_RULES)
def test_each_new_rule_holds_against_sign_flipping_peers_where_averaging_collapses(rule):
    """Three of twelve devices send their model times -3: the weighted mean collapses the honest
    devices; each new rule, told of up to three liars, keeps them at the no-attack level."""
    clean = _honest_f1("none", "[]")
    assert _honest_f1("none", ATTACK) < clean - 0.25
    assert _honest_f1(rule, ATTACK) > clean - 0.05


@pytest.mark.parametrize(("method", "rule", "stat"), [("fedsub", "clipped-gossip", "robust_row_groups"),
                                                      ("safl", "multi-krum", "robust_fusions"),
                                                      ("ditto", "geometric-median", "robust_fusions")])
def test_the_new_rules_are_usable_wherever_the_robust_field_is(method, rule, stat):
    """FedSub's row fusion, SAFL's stage two and a method of the averaging family take them from
    the same field, and count what they did."""
    summary = run_scenario(load_scenario(SCENARIO, [f"algorithm.name={method}", "rounds=5", f"algorithm.robust={rule}",
                                                    f"adversaries={ATTACK}"]), progress=False)
    assert summary is not None and summary["algorithm_stats"][stat] > 0
