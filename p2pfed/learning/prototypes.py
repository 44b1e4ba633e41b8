"""Class prototypes: the mean of each class a device holds, of its input data (FedSub ubiquitous
Alg. 1 l.5, ``P_y = avg(x)``) or of its penultimate-layer features (journal Eq. 1, as FedProto)."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np
import torch

from torch import nn


@torch.no_grad()
def class_prototypes(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                     num_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(classes, prototypes, counts)`` for the classes present in ``y``.

    ``prototypes[i]`` is the mean of f(x) over the samples of ``classes[i]``; ``counts[i]`` is
    how many samples that mean is taken over (|D_y|).
    """
    model.eval()
    features = cast(Callable[[torch.Tensor], torch.Tensor], model.features)
    return class_means(features(x), y, num_classes)


def class_means(feats: torch.Tensor, y: torch.Tensor,
                num_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(classes, means, counts)`` of the rows of ``feats`` per class present in ``y``; with the
    raw inputs as ``feats`` these are the input-space prototypes, independent of any model."""
    feats = feats.to(torch.float32)
    counts_all = torch.bincount(y, minlength=num_classes)
    classes = torch.nonzero(counts_all, as_tuple=False).flatten()
    sums = torch.zeros(num_classes, feats.shape[1], dtype=feats.dtype)
    sums.index_add_(0, y, feats)
    protos = sums[classes] / counts_all[classes].unsqueeze(1).to(feats.dtype)
    return classes.numpy().astype(np.int64), protos.numpy().astype(np.float32), \
        counts_all[classes].numpy().astype(np.int64)


def average_prototypes(entries: list[tuple[np.ndarray, np.ndarray, np.ndarray]], num_classes: int,
                       dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per class, the count-weighted mean of the ``(classes, prototypes, counts)`` entries
    (FedProto Eq. 7). Returns ``(prototypes (num_classes, dim), known)``; ``known[c]`` is False
    for classes no entry holds, whose row stays zero."""
    sums = np.zeros((num_classes, dim), dtype=np.float64)
    weights = np.zeros(num_classes, dtype=np.float64)
    for classes, protos, counts in entries:
        np.add.at(sums, classes, protos.astype(np.float64) * counts[:, None])
        np.add.at(weights, classes, counts.astype(np.float64))
    known = weights > 0
    sums[known] /= weights[known, None]
    return torch.as_tensor(sums, dtype=torch.float32), torch.as_tensor(known)
