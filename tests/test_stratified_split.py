"""The stratified split every run makes equals scikit-learn's ``train_test_split``, the reference,
index for index; where scikit-learn refuses, it refuses too."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.model_selection import train_test_split

from p2pfed.data.stratified import stratified_train_test_split


def _sklearn(labels: np.ndarray, test_size: float, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        train, test = train_test_split(np.arange(len(labels)), test_size=test_size, stratify=labels,
                                       random_state=seed)
    except ValueError:
        return None
    return train, test


@settings(max_examples=300, deadline=None)
@given(labels=st.lists(st.integers(0, 6), min_size=2, max_size=80),
       test_size=st.floats(0.01, 0.99), seed=st.integers(0, 2**31 - 2))
def test_the_split_equals_scikit_learns(labels, test_size, seed):
    y = np.array(labels)
    expected = _sklearn(y, test_size, seed)
    if expected is None:
        try:
            stratified_train_test_split(y, test_size, seed)
        except ValueError:
            return
        raise AssertionError("scikit-learn refuses this split; ours must too")
    train, test = stratified_train_test_split(y, test_size, seed)
    assert np.array_equal(train, expected[0]) and np.array_equal(test, expected[1])


def test_a_device_with_many_samples_and_ties_between_classes():
    y = np.repeat(np.arange(6), [150, 150, 90, 90, 31, 7])
    for seed in range(5):
        train, test = stratified_train_test_split(y, 0.3, seed)
        expected = _sklearn(y, 0.3, seed)
        assert expected is not None
        assert np.array_equal(train, expected[0]) and np.array_equal(test, expected[1])


def test_the_command_line_starts_without_scikit_learn_scipy_stats_or_pandas():
    """They are imported where used (a few datasets and methods); each peer of a launch starts
    faster without them."""
    code = ("import sys, p2pfed.cli.main; "
            "print(sorted(m for m in ('sklearn', 'scipy.stats', 'pandas') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
