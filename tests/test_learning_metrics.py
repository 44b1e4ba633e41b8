"""The vectorised metrics against scikit-learn, the reference they replace on the hot path."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import accuracy_score, f1_score

from p2pfed.learning.metrics import (grouped_loss, grouped_metrics, macro_f1_accuracy, macro_f1_accuracy_present,
                                     metrics_many)
from p2pfed.learning.model import build_model
from p2pfed.learning.training import evaluate


def sk_f1(t: np.ndarray, p: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(f1_score(t, p, average="macro", zero_division=0))


@st.composite
def label_pairs(draw, max_classes: int = 12, max_len: int = 60):
    """(y_true, y_pred) over a random subset of classes: absent classes, one class, length 0."""
    classes = draw(st.lists(st.integers(0, max_classes - 1), min_size=1, max_size=max_classes,
                            unique=True))
    n = draw(st.integers(0, max_len))
    labels = st.lists(st.sampled_from(classes), min_size=n, max_size=n)
    return np.array(draw(labels), dtype=np.int64), np.array(draw(labels), dtype=np.int64)


@settings(max_examples=150, deadline=None)
@given(label_pairs())
def test_macro_f1_and_accuracy_match_sklearn(pair) -> None:
    t, p = pair
    f1, acc = macro_f1_accuracy(t, p)
    if t.size == 0:  # scikit-learn refuses empty input; we report "no measurement"
        assert np.isnan(f1) and np.isnan(acc)
        return
    ref = sk_f1(t, p)
    assert f1 == ref  # bit for bit: the mean is taken over the same values in the same order
    assert acc == accuracy_score(t, p)


@settings(max_examples=60, deadline=None)
@given(st.lists(label_pairs(max_len=30), min_size=0, max_size=8))
def test_metrics_many_equals_each_device_alone(pairs) -> None:
    many = metrics_many(pairs)
    num_classes = 1 + max((int(max(t.max(), p.max())) for t, p in pairs if t.size), default=0)
    assert many.f1_macro.shape == (len(pairs),)
    for i, (t, p) in enumerate(pairs):
        f1, acc = macro_f1_accuracy(t, p)
        assert many.samples[i] == t.size
        np.testing.assert_equal(many.accuracy[i], acc)
        if t.size == 0:
            assert np.isnan(many.f1_macro[i])
        else:  # row sums over all classes: last-bit differences from 8 classes up
            assert many.f1_macro[i] == pytest.approx(f1, abs=1e-12)
            if num_classes < 8:
                assert many.f1_macro[i] == f1


def test_grouped_metrics_takes_stacked_tensors_and_fixed_class_count() -> None:
    y = torch.tensor([0, 1, 2, 2, 0, 0])
    pred = torch.tensor([0, 2, 2, 2, 1, 0])
    dev = torch.tensor([0, 0, 0, 2, 2, 2])
    m = grouped_metrics(y, pred, dev, num_groups=3, num_classes=6)
    assert m.f1_macro[0] == pytest.approx(sk_f1(np.array([0, 1, 2]), np.array([0, 2, 2])))
    assert np.isnan(m.f1_macro[1]) and np.isnan(m.accuracy[1]) and m.samples[1] == 0
    assert m.accuracy[2] == pytest.approx(2 / 3)


def test_bad_labels_are_refused_with_the_field_named() -> None:
    with pytest.raises(ValueError, match="y_pred"):
        macro_f1_accuracy([0, 1], [0, -1])
    with pytest.raises(ValueError, match="differ in length"):
        macro_f1_accuracy([0, 1], [0])
    with pytest.raises(ValueError, match="integer"):
        macro_f1_accuracy(np.array([0.5]), np.array([0]))
    with pytest.raises(ValueError, match="outside"):
        grouped_metrics([0, 7], [0, 1], [0, 0], 1, num_classes=6)
    with pytest.raises(ValueError, match="group ids"):
        grouped_metrics([0, 1], [0, 1], [0, 3], 2)


def test_evaluate_uses_the_same_definition_as_sklearn() -> None:
    torch.manual_seed(0)
    model = build_model(8, 5, [16], seed=0)
    x = torch.randn(40, 8)
    y = torch.randint(0, 5, (40,))
    ev = evaluate(model, x, y)
    pred = model(x).argmax(dim=1).numpy()
    assert ev.f1_macro == sk_f1(y.numpy(), pred)
    assert ev.accuracy == accuracy_score(y.numpy(), pred)
    with torch.no_grad():
        assert ev.loss == float(F.cross_entropy(model(x), y))


def test_grouped_loss_matches_per_device_cross_entropy() -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(30, 4, generator=g)
    y = torch.randint(0, 4, (30,), generator=g)
    dev = torch.randint(0, 3, (30,), generator=g)
    dev[dev == 2] = 3  # device 2 has no samples
    losses = grouped_loss(logits, y, dev, num_groups=4)
    for d in (0, 1, 3):
        sel = dev == d
        assert losses[d] == pytest.approx(float(F.cross_entropy(logits[sel], y[sel])), rel=1e-6)
    assert np.isnan(losses[2])


@settings(max_examples=150, deadline=None)
@given(st.lists(label_pairs(max_len=30), min_size=1, max_size=6))
def test_f1_over_the_test_sets_classes_matches_sklearn_with_those_labels(pairs) -> None:
    """``f1_present``: scikit-learn's macro-F1 with ``labels`` the classes of y_true, one device
    alone and many together; a class only predicted adds no zero to it."""
    many = metrics_many(pairs)
    for i, (t, p) in enumerate(pairs):
        _, _, alone = macro_f1_accuracy_present(t, p)
        if t.size == 0:
            assert np.isnan(alone) and np.isnan(many.f1_present[i])
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = float(f1_score(t, p, labels=np.unique(t), average="macro", zero_division=0))
        assert alone == pytest.approx(ref, abs=1e-12)
        assert many.f1_present[i] == pytest.approx(ref, abs=1e-12)


def test_a_class_predicted_but_absent_from_the_test_set_lowers_only_the_usual_macro_f1() -> None:
    """The dynamic-data case: the test set has classes 0 and 1, the model also predicts 2."""
    t = np.array([0, 0, 1, 1])
    p = np.array([0, 2, 1, 1])
    f1, _, present = macro_f1_accuracy_present(t, p)
    assert f1 == pytest.approx((2 / 3 + 1.0 + 0.0) / 3)       # class 2 counted, with F1 0
    assert present == pytest.approx((2 / 3 + 1.0) / 2)        # only the test set's classes
