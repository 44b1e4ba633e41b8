"""Missing-prototype prediction by collaborative filtering (FedSub, ubiquitous version, Alg. 3).

A device that has no data for a class has no prototype for it, so it cannot be clustered with
the peers that do and never receives their subnetwork for that class. As in recommender
systems, the missing prototype is predicted from the most similar members: similarity is the
mean cosine over the classes two members both hold (Eq. 1), and the prediction is the
similarity-weighted mean of the n most similar members' prototypes for the class (Eq. 2).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

Prototypes = Mapping[int, Mapping[int, np.ndarray]]   # member -> class -> prototype


def _stack(prototypes: Prototypes, members: list[int], classes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Unit-normalised prototypes (M, C, d) with a held mask (M, C); zeros where absent."""
    dim = len(next(iter(next(iter(prototypes.values())).values())))
    unit = np.zeros((len(members), len(classes), dim), dtype=np.float64)
    held = np.zeros((len(members), len(classes)), dtype=bool)
    for i, m in enumerate(members):
        for j, c in enumerate(classes):
            p = prototypes[m].get(c)
            if p is None:
                continue
            p = np.asarray(p, dtype=np.float64)
            norm = np.linalg.norm(p)
            held[i, j] = True
            if norm > 0:
                unit[i, j] = p / norm
    return unit, held


def similarity_matrix(prototypes: Prototypes) -> tuple[list[int], np.ndarray]:
    """Eq. 1: S[u, v] = mean cosine of u's and v's prototypes over the classes both hold.

    Returns the member ids (sorted) and S; S is NaN where two members share no class and on the
    diagonal (a member is not its own neighbour).
    """
    members = sorted(prototypes)
    classes = sorted({c for m in members for c in prototypes[m]})
    if not members or not classes:
        return members, np.full((len(members), len(members)), np.nan)
    unit, held = _stack(prototypes, members, classes)
    cos = np.einsum("ucd,vcd->uvc", unit, unit)
    shared = held[:, None, :] & held[None, :, :]
    count = shared.sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.where(count > 0, (cos * shared).sum(axis=2) / count, np.nan)
    np.fill_diagonal(sim, np.nan)
    return members, sim


def predict_missing(prototypes: Prototypes, num_neighbors: int) -> dict[int, dict[int, np.ndarray]]:
    """Alg. 3: for every member and every class some other member holds but it lacks, the
    similarity-weighted mean (Eq. 2) of the prototypes of the ``num_neighbors`` most similar
    members that hold the class. Only members with positive similarity vote (a weighted mean
    with negative weights is not a mean); a class nobody similar holds stays unpredicted.
    Ties in similarity go to the lower member id, so the result is deterministic.
    """
    if num_neighbors < 1:
        raise ValueError(f"num_neighbors must be >= 1, got {num_neighbors}")
    members, sim = similarity_matrix(prototypes)
    classes = sorted({c for m in members for c in prototypes[m]})
    predicted: dict[int, dict[int, np.ndarray]] = {}
    for i, u in enumerate(members):
        for c in classes:
            if c in prototypes[u]:
                continue
            candidates = [(sim[i, k], v) for k, v in enumerate(members)
                          if c in prototypes[v] and np.isfinite(sim[i, k]) and sim[i, k] > 0]
            if not candidates:
                continue
            best = sorted(candidates, key=lambda t: (-t[0], t[1]))[:num_neighbors]
            weights = np.array([s for s, _ in best], dtype=np.float64)
            stacked = np.stack([np.asarray(prototypes[v][c], dtype=np.float64) for _, v in best])
            guess = weights @ stacked / weights.sum()
            predicted.setdefault(u, {})[c] = guess.astype(np.float32)
    return predicted
