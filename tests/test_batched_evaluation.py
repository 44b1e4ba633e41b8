"""Scoring many devices at once equals scoring each alone, and a thread count changes no result."""

from __future__ import annotations

import math

import pytest
import torch

from p2pfed.engine.runner import run_scenario
from p2pfed.learning.batched_evaluation import evaluate_many
from p2pfed.learning.model import build_model
from p2pfed.learning.training import evaluate
from p2pfed.scenario.loader import load_scenario
from tests.conftest import ROOT


def test_evaluating_many_models_at_once_equals_one_at_a_time():
    data = torch.Generator().manual_seed(0)
    sizes = [17, 0, 1, 40, 23, 40, 5]
    models = [build_model(6, 4, [8, 5], seed=i) for i in range(5)]
    models += [build_model(6, 4, [8, 5], seed=9, unit_gates=True), build_model(6, 4, [3], seed=10)]
    xs = [torch.randn(n, 6, generator=data) for n in sizes]
    ys = [torch.randint(0, 4, (n,), generator=data) for n in sizes]
    together = evaluate_many(models, xs, ys)
    for model, x, y, got in zip(models, xs, ys, together, strict=True):
        want = evaluate(model, x, y)
        for field in ("f1_macro", "loss", "accuracy"):
            a, b = getattr(got, field), getattr(want, field)
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-6, abs=1e-7), field
    assert math.isnan(together[1].f1_macro) and together[2].accuracy in (0.0, 1.0)


def test_scoring_in_chunks_gives_what_one_group_gives():
    """Thousands of devices are scored ``GROUP_LIMIT`` at a time: any split gives the same
    predictions, so the same F1 and accuracy; the loss's per-device sum to float rounding."""
    data = torch.Generator().manual_seed(1)
    sizes = [17, 0, 1, 40, 23, 40, 5, 12]
    models = [build_model(6, 4, [8, 5], seed=i) for i in range(len(sizes))]
    xs = [torch.randn(n, 6, generator=data) for n in sizes]
    ys = [torch.randint(0, 4, (n,), generator=data) for n in sizes]
    whole, split = evaluate_many(models, xs, ys), evaluate_many(models, xs, ys, limit=3)
    for a, b in zip(whole, split, strict=True):
        for field in ("f1_macro", "accuracy", "f1_present"):
            x, y = getattr(a, field), getattr(b, field)
            assert (math.isnan(x) and math.isnan(y)) or x == y, field
        assert (math.isnan(a.loss) and math.isnan(b.loss)) or a.loss == pytest.approx(b.loss, rel=1e-6)


def test_plain_mlps_are_scored_together_without_switching_their_modes(monkeypatch):
    """Their grouped forward runs no module, so the per-module mode switch (a walk over every
    model's modules, twice) is skipped; their modes and scores are as before."""
    data = torch.Generator().manual_seed(1)
    models = [build_model(6, 4, [8, 5], seed=i) for i in range(4)]
    models[0].train(False)
    xs = [torch.randn(n, 6, generator=data) for n in (9, 3, 12, 7)]
    ys = [torch.randint(0, 4, (x.shape[0],), generator=data) for x in xs]
    want = [evaluate(m, x, y) for m, x, y in zip(models, xs, ys, strict=True)]

    def no_switch(self, mode=True):
        raise AssertionError("a plain MLP's mode was switched")
    monkeypatch.setattr(torch.nn.Module, "train", no_switch)
    got = evaluate_many(models, xs, ys)
    assert [g.loss for g in got] == pytest.approx([w.loss for w in want], rel=1e-6)
    assert [m.training for m in models] == [False, True, True, True]


def test_cnns_with_trained_batch_norm_evaluate_together_as_one_at_a_time():
    """CNNs (issue 33, goal 5) evaluate as one stacked forward, batch norm reading each device's
    own running statistics, and training mode is left as it was."""
    from p2pfed.learning import batched_evaluation
    from p2pfed.learning.cnn import CNN

    data = torch.Generator().manual_seed(1)
    sizes = [12, 0, 30, 7]
    models = []
    for i in range(len(sizes)):
        torch.manual_seed(i)
        model = CNN(36, 4, [1, 6, 6], [3, 5], 3)
        model.train()
        with torch.no_grad():   # statistics of their own: a few training-mode passes on different data
            for _ in range(3):
                model(torch.randn(8, 36, generator=data) * (i + 1) + i)
        models.append(model)
    xs = [torch.randn(n, 36, generator=data) for n in sizes]
    ys = [torch.randint(0, 4, (n,), generator=data) for n in sizes]
    groups = []
    real = batched_evaluation._evaluate_group
    batched_evaluation._evaluate_group = lambda m, *a: groups.append(len(m)) or real(m, *a)
    try:
        together = evaluate_many(models, xs, ys)
    finally:
        batched_evaluation._evaluate_group = real
    assert groups == [4] and all(m.training for m in models)
    for model, x, y, got in zip(models, xs, ys, together, strict=True):
        want = evaluate(model, x, y)
        for field in ("f1_macro", "loss", "accuracy"):
            a, b = getattr(got, field), getattr(want, field)
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-5, abs=1e-6), field


def test_a_run_gives_the_same_numbers_with_one_thread_or_two(tmp_path):
    """``engine.torch_threads: auto`` uses every core in a simulation and one in a sweep worker:
    on a short small run the numbers are identical (a long run may differ in float rounding)."""
    files = []
    for threads in (1, 2):
        loaded = load_scenario(ROOT / "scenarios" / "synthetic-small.yaml",
                               ["rounds=4", f"engine.torch_threads={threads}", "algorithm.name=gossip-avg"])
        run_scenario(loaded, tmp_path / str(threads), progress=False)
        files.append([(tmp_path / str(threads) / name).read_text() for name in ("rounds.csv", "devices.csv")])
    assert files[0] == files[1]


def test_auto_threads_give_every_core_only_to_batched_rounds(monkeypatch):
    """``auto``: all cores for synchronous rounds (batched), one for the contact runtime and real
    peers (one device at a time), one in a sweep worker; a number is taken as given."""
    from p2pfed.scenario.threads import WORKER_THREADS_ENV, machine_cores, torch_threads

    monkeypatch.delenv(WORKER_THREADS_ENV, raising=False)
    assert torch_threads("auto") == machine_cores()
    assert torch_threads("auto", batched=False) == 1
    assert torch_threads(3, batched=False) == 3
    monkeypatch.setenv(WORKER_THREADS_ENV, "1")
    assert torch_threads("auto") == 1
