"""scikit-learn's stratified ``train_test_split``, index for index, without importing scikit-learn.

Every run splits each device's data; importing scikit-learn (and the SciPy and pandas modules it
pulls in) for that one call was about half of the start-up work of each ``p2pfed`` process, and a
launch starts one per peer. This follows ``StratifiedShuffleSplit`` with one split and an integer
``random_state`` draw for draw, raising ``ValueError`` where it does; the tests compare it with
scikit-learn's own over generated labels, sizes and seeds.
"""

from __future__ import annotations

from math import ceil

import numpy as np


def stratified_train_test_split(labels: np.ndarray, test_size: float,
                                random_state: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions (train, test) into ``labels``, as ``train_test_split(np.arange(len(labels)),
    test_size=test_size, stratify=labels, random_state=random_state)`` returns them."""
    labels = np.asarray(labels)
    n_samples = len(labels)
    if not 0 < test_size < 1:
        raise ValueError(f"test_size={test_size} should be a float in the (0, 1) range")
    n_test = ceil(test_size * n_samples)
    n_train = n_samples - n_test
    if n_train == 0:
        raise ValueError(f"with {n_samples} samples and test_size={test_size} the train set is empty")
    classes, class_of, class_counts = np.unique(labels, return_inverse=True, return_counts=True)
    if np.min(class_counts) < 2:
        raise ValueError("a class has a single member: it cannot be stratified")
    if n_train < len(classes) or n_test < len(classes):
        raise ValueError(f"train ({n_train}) and test ({n_test}) sizes must each reach the number of "
                         f"classes ({len(classes)})")
    members = np.split(np.argsort(class_of, kind="stable"), np.cumsum(class_counts)[:-1])
    rng = np.random.RandomState(random_state)
    n_i = _approximate_mode(class_counts, n_train, rng)
    t_i = _approximate_mode(class_counts - n_i, n_test, rng)
    train: list[int] = []
    test: list[int] = []
    for i in range(len(classes)):
        shuffled = members[i].take(rng.permutation(class_counts[i]), mode="clip")
        train.extend(shuffled[: n_i[i]])
        test.extend(shuffled[n_i[i]: n_i[i] + t_i[i]])
    return rng.permutation(train), rng.permutation(test)


def _approximate_mode(class_counts: np.ndarray, n_draws: int, rng: np.random.RandomState) -> np.ndarray:
    """How many of ``n_draws`` each class gets: its proportional share rounded down, then one more
    for the classes with the largest remainders, ties broken at random."""
    continuous = class_counts / class_counts.sum() * n_draws
    floored = np.floor(continuous)
    need_to_add = int(n_draws - floored.sum())
    if need_to_add > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (inds,) = np.where(remainder == value)
            add_now = min(len(inds), need_to_add)
            floored[rng.choice(inds, size=add_now, replace=False)] += 1
            need_to_add -= add_now
            if need_to_add == 0:
                break
    return floored.astype(int)
