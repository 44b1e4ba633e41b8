"""Classification metrics from one confusion-count computation, for one device or many at once.

Every device is evaluated at every evaluation point, so at hundreds of devices the per-call input
validation of ``sklearn.metrics.f1_score`` (milliseconds a call) outweighed the model's forward
pass. Here a single ``np.bincount`` over ``(group, true, predicted)`` gives every group's
confusion counts, and macro-F1 and accuracy follow with a few array operations.

The definition is scikit-learn's ``f1_score(y_true, y_pred, average="macro", zero_division=0)``:
per class ``F1 = 2 TP / (2 TP + FP + FN)``, averaged over the classes that occur in ``y_true`` or
``y_pred`` (a class absent from both is not counted; a class present in only one scores 0).
scikit-learn stays the reference the tests compare against. A group with no samples gets NaN.

``f1_present`` averages the same per-class F1 over the classes of ``y_true`` only (scikit-learn's
``f1_score(..., labels=np.unique(y_true), average="macro")``): a class the model predicts but the
test set lacks adds no zero. Under drift (a device's classes come and go) the first average
punishes predicting a class absent now; the second measures how well the classes present are
recognised. Both are reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class GroupMetrics:
    """Per-group metrics (arrays of length ``num_groups``; NaN where a group has no samples)."""

    f1_macro: np.ndarray
    accuracy: np.ndarray
    samples: np.ndarray
    f1_present: np.ndarray   # macro-F1 over the classes in y_true only


def _labels(values: np.ndarray | torch.Tensor | Sequence[int], name: str) -> np.ndarray:
    arr = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of class ids, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integer class ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and int(arr.min()) < 0:
        raise ValueError(f"{name} holds a negative class id ({int(arr.min())})")
    return arr


def confusion_counts(y_true: np.ndarray, y_pred: np.ndarray, groups: np.ndarray,
                     num_groups: int, num_classes: int) -> np.ndarray:
    """Counts (num_groups, num_classes, num_classes): ``[g, t, p]`` = samples of group ``g`` with
    true class ``t`` predicted as ``p``; one ``np.bincount`` for all groups."""
    flat = (groups * num_classes + y_true) * num_classes + y_pred
    size = num_groups * num_classes * num_classes
    return np.bincount(flat, minlength=size).reshape(num_groups, num_classes, num_classes)


def _per_class_f1(conf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-class F1 (0 where the class is absent), which classes are present, and TP counts."""
    tp = np.diagonal(conf, axis1=1, axis2=2).astype(np.float64)
    denom = (conf.sum(axis=2) + conf.sum(axis=1)).astype(np.float64)  # = 2 TP + FP + FN
    present = denom > 0                                                # in y_true or y_pred
    f1 = np.divide(2.0 * tp, denom, out=np.zeros_like(tp), where=present)
    return f1, present, tp


def metrics_from_confusion(conf: np.ndarray) -> GroupMetrics:
    """Macro-F1 and accuracy of each group from its confusion counts (see the module docstring).

    Row sums include the zeros of absent classes: with fewer than 8 classes numpy adds them in
    order and the result equals scikit-learn's bit for bit; with more, numpy's pairwise
    summation may group them differently (last-bit differences).
    """
    f1, present, tp = _per_class_f1(conf)
    true_sum = conf.sum(axis=2).astype(np.float64)
    n_present = present.sum(axis=1)
    in_true = true_sum > 0
    samples = true_sum.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        f1_macro = np.where(n_present > 0, f1.sum(axis=1) / n_present, np.nan)
        f1_present = np.where(samples > 0, np.where(in_true, f1, 0.0).sum(axis=1) / in_true.sum(axis=1), np.nan)
        accuracy = np.where(samples > 0, tp.sum(axis=1) / samples, np.nan)
    return GroupMetrics(f1_macro=f1_macro, accuracy=accuracy, samples=samples.astype(np.int64),
                        f1_present=f1_present)


def grouped_metrics(y_true: np.ndarray | torch.Tensor, y_pred: np.ndarray | torch.Tensor,
                    groups: np.ndarray | torch.Tensor, num_groups: int,
                    num_classes: int | None = None) -> GroupMetrics:
    """Metrics of many groups (devices) whose samples are stacked, ``groups[i]`` naming the
    group of sample ``i`` (0 ≤ id < ``num_groups``)."""
    t, p = _labels(y_true, "y_true"), _labels(y_pred, "y_pred")
    g = _labels(groups, "groups")
    if not t.shape == p.shape == g.shape:
        raise ValueError(f"y_true, y_pred and groups differ in length: {t.size}, {p.size}, {g.size}")
    if num_groups < 0 or (g.size and int(g.max()) >= num_groups):
        raise ValueError(f"group ids must lie in 0..{num_groups - 1}")
    largest = max(int(t.max()) if t.size else -1, int(p.max()) if p.size else -1)
    c = largest + 1 if num_classes is None else num_classes
    if largest >= c:
        raise ValueError(f"class id {largest} outside 0..{c - 1}")
    return metrics_from_confusion(confusion_counts(t, p, g, num_groups, max(c, 1)))


def metrics_many(pairs: Sequence[tuple[np.ndarray | torch.Tensor, np.ndarray | torch.Tensor]],
                 num_classes: int | None = None) -> GroupMetrics:
    """Metrics of each ``(y_true, y_pred)`` pair (one per device), from one confusion computation."""
    trues = [_labels(t, "y_true") for t, _ in pairs]
    preds = [_labels(p, "y_pred") for _, p in pairs]
    for i, (t, p) in enumerate(zip(trues, preds)):
        if t.shape != p.shape:
            raise ValueError(f"pair {i}: y_true has {t.size} labels, y_pred {p.size}")
    sizes = np.array([t.size for t in trues], dtype=np.int64)
    groups = np.repeat(np.arange(len(pairs)), sizes)
    def cat(xs: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(xs) if xs else np.empty(0, dtype=np.int64)
    return grouped_metrics(cat(trues), cat(preds), groups, len(pairs), num_classes)


def macro_f1_accuracy(y_true: np.ndarray | torch.Tensor,
                      y_pred: np.ndarray | torch.Tensor) -> tuple[float, float]:
    """Macro-F1 and accuracy of one device (NaN, NaN for no samples)."""
    f1, accuracy, _ = macro_f1_accuracy_present(y_true, y_pred)
    return f1, accuracy


def macro_f1_accuracy_present(y_true: np.ndarray | torch.Tensor,
                              y_pred: np.ndarray | torch.Tensor) -> tuple[float, float, float]:
    """Macro-F1, accuracy and macro-F1 over the classes of ``y_true`` of one device (NaNs for no
    samples)."""
    t, p = _labels(y_true, "y_true"), _labels(y_pred, "y_pred")
    if t.shape != p.shape:
        raise ValueError(f"y_true and y_pred differ in length: {t.size}, {p.size}")
    if t.size == 0:
        return float("nan"), float("nan"), float("nan")
    c = int(max(t.max(), p.max())) + 1
    conf = confusion_counts(t, p, np.zeros_like(t), 1, c)
    f1, present, tp = _per_class_f1(conf)
    in_true = conf[0].sum(axis=1) > 0
    # the means over the classes counted only: scikit-learn's exact summation, any class count
    return float(f1[0][present[0]].mean()), float(tp.sum() / t.size), float(f1[0][in_true].mean())


def grouped_loss(logits: torch.Tensor, y: torch.Tensor, groups: torch.Tensor,
                 num_groups: int) -> np.ndarray:
    """Mean cross-entropy of each group's samples (NaN for a group without samples).

    Per-sample losses are summed per group in float64, so a group's value agrees with
    ``F.cross_entropy`` on its own samples to float32 rounding, not bit for bit.
    """
    per_sample = F.cross_entropy(logits, y, reduction="none").detach().double().cpu().numpy()
    g = _labels(groups, "groups")
    sums = np.bincount(g, weights=per_sample, minlength=num_groups)
    counts = np.bincount(g, minlength=num_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)
