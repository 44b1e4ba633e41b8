"""Offloaded work (``ctx.offload``): computed together when first asked for, or ahead in a helper
process during a contact run's batch windows (FedSub's K sweeps): same results, firing in a real
run, and only where it pays."""

import numpy as np
import pytest

from p2pfed.engine.runner import run_scenario
from p2pfed.algorithms.fedsub.clustering import choose_k_by_dbi_many
from p2pfed.engine.offload import ComputeWhenAsked, HelperProcess
from p2pfed.scenario.loader import load_scenario
from p2pfed.scenario.errors import ScenarioError

PARAMS = {"k_max": 6, "n_init": 2, "min_cluster_size": 2, "k_rule": "min-size", "seed": 3}


def _problems(count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 40, size=count)
    return [np.concatenate([rng.normal(c, 0.3, size=(n // 3 + 1, 7)) for c in range(3)])[:n] for n in sizes]


def test_requests_answered_by_the_helper_or_taken_back_equal_those_computed_here():
    """Ten requests sent at once, the oldest asked for first: while more than the helper computes
    at a time are waiting, the simulation takes the newest back; every answer is the same."""
    problems = _problems(40)
    helper = HelperProcess()
    try:
        answers = [helper.submit_many(choose_k_by_dbi_many, problems[i:i + 4], **PARAMS) for i in range(0, 40, 4)]
        got = [c for answer in answers for c in answer.result()]
        assert helper.items_sent == 40
    finally:
        helper.close()
    here = choose_k_by_dbi_many(problems, **PARAMS)
    for a, b in zip(got, here, strict=True):
        assert (a.k, a.dbi, a.dbi_by_k, a.literal_k) == (b.k, b.dbi, b.dbi_by_k, b.literal_k)
        assert np.array_equal(a.labels, b.labels)


def test_synchronous_rounds_do_not_use_the_helper_and_refuse_to_be_told_to(repo_root, tmp_path):
    """Splitting a round's sweeps with the helper was measured slower than computing them here."""
    scenario = repo_root / "scenarios" / "synthetic-small.yaml"
    with pytest.raises(ScenarioError, match=r"engine.offload: true: .*asynchronous.batch_window_s > 0"):
        load_scenario(scenario, ["engine.offload=true"])
    with pytest.raises(ScenarioError, match=r"engine.sweep_helper: renamed engine.offload"):
        load_scenario(scenario, ["engine.sweep_helper=true"])
    summary = run_scenario(load_scenario(scenario, ["rounds=2", "dataset.synthetic.num_devices=6"]),
                           tmp_path / "auto", progress=False)
    assert "offload" not in summary


def test_a_fedsub_contact_run_sends_sweeps_to_the_helper_and_gets_the_same_results(repo_root, tmp_path):
    """16 walkers whose steps finish at the end of 50 s windows (60 s period): each step's K
    sweeps go to the helper when the step starts (``summary.json``), and the results files equal
    those of the run without it, where they wait and are computed together at the window's end."""
    overrides = ["dataset.synthetic.num_devices=16", "dataset.synthetic.samples_per_class=20",
                 "model.hidden=[16,32]", "contacts.kind=random-waypoint", "contacts.area_m=[120,120]",
                 "contacts.range_m=40", "contacts.duration_s=600", "asynchronous.train_period_s=60",
                 "asynchronous.batch_window_s=50", "evaluation.every_s=300"]
    scenario = repo_root / "scenarios" / "synthetic-small.yaml"
    with_helper = run_scenario(load_scenario(scenario, [*overrides, "engine.offload=true"]),
                               tmp_path / "helper", progress=False)
    assert with_helper["offload"]["items_sent"] > 0
    assert with_helper["asynchronous"]["devices_per_batch"] > 1
    without = run_scenario(load_scenario(scenario, [*overrides, "engine.offload=false"]),
                           tmp_path / "alone", progress=False)
    assert "offload" not in without
    for name in ("rounds.csv", "devices.csv"):
        assert (tmp_path / "helper" / name).read_text() == (tmp_path / "alone" / name).read_text()
    assert with_helper["algorithm_stats"] == without["algorithm_stats"]


def test_a_helper_that_stops_is_replaced_by_computing_here_with_a_warning():
    problems = _problems(8, seed=1)
    helper = HelperProcess()
    try:
        first = helper.submit_many(choose_k_by_dbi_many, problems[:4], **PARAMS)
        helper._process.kill()
        helper._process.join()
        with pytest.warns(RuntimeWarning, match="helper process stopped"):
            answers = first.result() + helper.submit_many(choose_k_by_dbi_many, problems[4:], **PARAMS).result()
        assert helper.failed is not None
    finally:
        helper.close()
    expected = choose_k_by_dbi_many(problems, **PARAMS)
    assert [c.labels.tolist() for c in answers] == [c.labels.tolist() for c in expected]


def _square_all(items: list[int], *, offset: int = 0) -> list[int]:
    _square_all.calls.append(list(items))
    return [i * i + offset for i in items]


_square_all.calls = []


def test_requests_waiting_together_are_computed_in_one_call_when_first_asked_for():
    """Devices acting at one instant all submit before any asks: one call per function and
    keyword arguments, each request answered its own part; a plain ``submit`` waits too."""
    _square_all.calls.clear()
    here = ComputeWhenAsked()
    a = here.submit_many(_square_all, [1, 2])
    b = here.submit_many(_square_all, [3])
    c = here.submit_many(_square_all, [4], offset=1)
    d = here.submit(sum, [5, 6])
    assert _square_all.calls == []
    assert b.result() == [9]
    assert sorted(map(tuple, _square_all.calls)) == [(1, 2, 3), (4,)]
    assert a.result() == [1, 4] and c.result() == [17] and d.result() == 11
    assert len(_square_all.calls) == 2


def test_the_helper_runs_any_importable_function_and_raises_its_errors_here():
    helper = HelperProcess()
    try:
        assert helper.submit(sum, [1, 2, 3]).result() == 6
        failing = helper.submit(int, "not a number")
        with pytest.raises(ValueError, match="invalid literal"):
            failing.result()
    finally:
        helper.close()
