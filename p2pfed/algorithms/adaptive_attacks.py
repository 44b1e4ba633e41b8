"""Attacks that adapt to what the liar sees: they aim at the robust rules, not past them.

Each computes the model it sends from the honest artifacts of its own neighbourhood, all a liar
can see in a serverless network: its own honest share and the newest share of the same part it
holds from each neighbour (``device.cache``; a neighbour that is itself a liar is not known to
be one and counts as honest). The models are taken as one vector over every shared float array
but class prototypes (integer arrays, masks and indices, are never changed); a neighbour whose
arrays do not have the own one's names and shapes is left out. With ``H`` those vectors (the own
first), ``μ`` and ``σ`` their coordinate-wise mean and standard deviation (``n - 1`` in the
denominator):

- ``alie`` ("A Little Is Enough: Circumventing Defenses For Distributed Learning", Baruch et al.,
  NeurIPS 2019): ``μ - z·σ``, a shift small enough to hide inside the honest
  spread. ``z`` is the entry's, or is derived from the neighbourhood's size ``n`` (the device and
  the neighbours whose shares it holds) and the liars expected among them, ``m`` (the adversary
  entry's share of the devices times ``n``, at least one), as the ClippedGossip authors'
  public implementation derives it (``epfml/byzantine-robust-decentralized-optimizer``,
  ``codes/attacks.py``): ``s = ⌊n/2 + 1⌋ - m`` supporters needed, ``z = Φ⁻¹((n - m - s)/(n - m))``
  with ``Φ`` the standard normal distribution function.
- ``ipm`` (inner-product manipulation, "Fall of Empires: Breaking Byzantine-tolerant SGD by Inner
  Product Manipulation", Xie, Koyejo and Gupta, UAI 2019, PMLR 115): ``-ε·μ``, the honest mean
  reversed and shrunk, so that the receivers' combination no longer points the honest way.
- ``min-max`` / ``min-sum`` ("Manipulating the Byzantine: Optimizing Model Poisoning Attacks and
  Defenses for Federated Learning", Shejwalkar and Houmansadr, NDSS 2021): ``μ - γ·p`` with the
  perturbation ``p`` the ``deviation`` names (``std``: ``σ``; ``unit-vec``: ``μ/‖μ‖``; ``sign``:
  the sign of ``μ``) and ``γ`` as large as a bisection finds while the malicious vector stays as
  close to the honest ones as they are to each other: its largest squared distance to any honest
  vector at most the largest between two honest vectors (``min-max``), or its sum of squared
  distances to them at most the smallest such sum of an honest vector (``min-sum``). The bisection
  follows the authors' public notebooks (``vrt1shjwlkr/NDSS21-Model-Poisoning``): ``γ`` starts at
  10, moves up after a success and down after a failure by a step halved each time, until two
  tries differ by at most 1e-5; the last success is used (none: ``γ = 0``, the honest mean).

A share of parts of a model (FedSub's subnetwork rows: each device sends the rows of its own
classes' units) is compared unit by unit: a neighbour's row counts at the liar's row of the same
unit, and where a neighbour sends no row for one of the liar's units its values are missing
(NaN). Means, deviations and distances are then taken over the values present (a coordinate
held by the liar alone has deviation 0; a distance covers the coordinates both vectors hold).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from statistics import NormalDist

import numpy as np

from p2pfed.algorithms.payloads import Received

ADAPTIVE_KINDS = ("alie", "ipm", "min-max", "min-sum")
DEVIATIONS = ("std", "unit-vec", "sign")
GAMMA_START = 10.0
GAMMA_TOLERANCE = 1e-5


def alie_z(n: int, m: int) -> float:
    """ALIE's ``z`` for ``n`` devices of which ``m`` lie (see the module); the normal quantile's
    argument is kept inside (0, 1), where too few honest devices would leave it undefined."""
    honest = n - m
    if honest <= 0:
        return 0.0
    supporters = math.floor(n / 2 + 1) - m
    share = (honest - supporters) / honest
    return NormalDist().inv_cdf(min(max(share, 1e-6), 1 - 1e-6))


def center(honest: np.ndarray) -> np.ndarray:
    """The coordinate-wise mean of the rows (over the values present where some are NaN)."""
    return np.asarray(np.nanmean(honest, axis=0) if np.isnan(honest).any() else honest.mean(axis=0))


def spread(honest: np.ndarray) -> np.ndarray:
    """The coordinate-wise standard deviation of the rows (``n - 1`` denominator; 0 for one row,
    and where fewer than two values are present)."""
    if np.isnan(honest).any():
        present = np.sum(~np.isnan(honest), axis=0)
        deviations = honest - np.nanmean(honest, axis=0)
        squares = np.nansum(deviations ** 2, axis=0)
        return np.asarray(np.where(present > 1, np.sqrt(squares / np.maximum(present - 1, 1)), 0.0))
    return np.asarray(np.std(honest, axis=0, ddof=1) if len(honest) > 1 else np.zeros(honest.shape[1]))


def alie(honest: np.ndarray, z: float) -> np.ndarray:
    """``μ - z·σ`` over the rows of ``honest``."""
    return np.asarray(center(honest) - z * spread(honest))


def ipm(honest: np.ndarray, epsilon: float) -> np.ndarray:
    """``-ε·μ`` over the rows of ``honest``."""
    return np.asarray(-epsilon * center(honest))


def perturbation(honest: np.ndarray, deviation: str) -> np.ndarray:
    """The direction ``min-max`` and ``min-sum`` move away along (subtracted from the mean)."""
    mean = center(honest)
    if deviation == "std":
        return spread(honest)
    if deviation == "unit-vec":
        norm = float(np.linalg.norm(mean))
        return np.asarray(mean / norm if norm > 0 else np.zeros_like(mean))
    if deviation == "sign":
        return np.asarray(np.sign(mean))
    raise ValueError(f"unknown deviation {deviation!r}; known: {', '.join(DEVIATIONS)}")


def squared_distances(rows: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances between every row of ``rows`` and every row of ``other`` (from
    their Gram matrix: no rows × rows × values array, whatever the model's size; with NaN, one
    row at a time over the coordinates both hold)."""
    if np.isnan(rows).any() or np.isnan(other).any():
        return np.asarray([np.nansum((other - row) ** 2, axis=1) for row in rows])
    squared = np.sum(rows ** 2, axis=1)[:, None] + np.sum(other ** 2, axis=1)[None, :] - 2.0 * rows @ other.T
    return np.asarray(np.maximum(squared, 0.0))


def min_max(honest: np.ndarray, deviation: str = "std", *, objective: str = "max") -> np.ndarray:
    """``μ - γ·p`` with the largest ``γ`` the bisection finds (see the module); ``objective``:
    ``max`` for min-max, ``sum`` for min-sum."""
    mean, p = center(honest), perturbation(honest, deviation)
    pairwise = squared_distances(honest, honest)
    bound = pairwise.max() if objective == "max" else pairwise.sum(axis=1).min()
    total = np.nansum if np.isnan(honest).any() else np.sum

    def holds(gamma: float) -> bool:
        d = total((honest - (mean - gamma * p)) ** 2, axis=1)
        return bool((d.max() if objective == "max" else d.sum()) <= bound)

    gamma, step, success = GAMMA_START, GAMMA_START, 0.0
    while abs(success - gamma) > GAMMA_TOLERANCE:
        if holds(gamma):
            success = gamma
            gamma += step / 2
        else:
            gamma -= step / 2
        step /= 2
    return np.asarray(mean - success * p)


def liars_among(n: int, liar_share: float) -> int:
    """The liars expected among ``n`` devices when ``liar_share`` of all devices lie (at least one)."""
    return max(1, round(liar_share * n))


def malicious_vector(kind: str, honest: np.ndarray, *, z: float | None, epsilon: float, deviation: str,
                     liar_share: float) -> np.ndarray:
    """What attack ``kind`` sends, from the neighbourhood's honest vectors (own first)."""
    if kind == "alie":
        n = len(honest)
        return alie(honest, alie_z(n, liars_among(n, liar_share)) if z is None else z)
    if kind == "ipm":
        return ipm(honest, epsilon)
    if kind in ("min-max", "min-sum"):
        return min_max(honest, deviation, objective="max" if kind == "min-max" else "sum")
    raise ValueError(f"unknown adaptive attack {kind!r}; known: {', '.join(ADAPTIVE_KINDS)}")


def flat(tensors: dict[str, np.ndarray], names: Iterable[str]) -> np.ndarray:
    """The named arrays end to end as one float64 vector."""
    return np.concatenate([np.asarray(tensors[n], dtype=np.float64).ravel() for n in names])


def unflat(vector: np.ndarray, like: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """``flat``'s inverse: the named arrays of ``like`` replaced by the vector's pieces."""
    out, at = dict(like), 0
    for n in names:
        size = like[n].size
        out[n] = vector[at:at + size].reshape(like[n].shape).astype(like[n].dtype)
        at += size
    return out


RowUnits = Callable[[dict[str, np.ndarray]], "dict[str, np.ndarray] | None"]


def aligned(theirs: dict[str, np.ndarray], tensors: dict[str, np.ndarray], names: list[str],
            mine: dict[str, np.ndarray] | None, row_units: RowUnits | None) -> np.ndarray | None:
    """A neighbour's arrays as one vector over the own ``names``: as they are when both send whole
    arrays of the same shapes; unit by unit (NaN where it sends no row of that unit) when
    ``row_units`` gives each share's rows' units (``mine``: the own share's); None when it holds
    none of the own values."""
    if not all(n in theirs for n in names):
        return None
    their_units = row_units(theirs) if mine is not None and row_units is not None else None
    if mine is None or their_units is None:
        return flat(theirs, names) if all(theirs[n].shape == tensors[n].shape for n in names) else None
    pieces, common_values = [], 0
    for n in names:
        if n not in mine or n not in their_units or theirs[n].shape[1:] != tensors[n].shape[1:]:
            return None
        piece = np.full(tensors[n].shape, np.nan)
        _, at_mine, at_theirs = np.intersect1d(mine[n], their_units[n], assume_unique=True, return_indices=True)
        piece[at_mine] = theirs[n][at_theirs]
        common_values += piece[at_mine].size
        pieces.append(piece.ravel())
    return np.concatenate(pieces) if common_values else None


def neighbourhood_poisoned(kind: str, part: str, tensors: dict[str, np.ndarray], cached: Iterable[Received],
                           *, skip: Iterable[str] = (), z: float | None = None, epsilon: float = 0.1,
                           deviation: str = "std", liar_share: float = 0.0,
                           row_units: RowUnits | None = None) -> dict[str, np.ndarray]:
    """The own shared ``tensors`` of ``part`` with their float arrays (but those in ``skip``)
    replaced by what ``kind`` sends, from them and the neighbours' cached shares of that part
    (or of every part, where the parts travelled as one message);
    ``row_units``: for a share of some units' rows, each array's rows' units (see the module)."""
    skipped = set(skip)
    names = [n for n, a in tensors.items() if n not in skipped and np.issubdtype(a.dtype, np.floating)]
    if not names:
        return tensors
    rows = [flat(tensors, names)]
    mine = row_units(tensors) if row_units is not None else None
    for item in cached:
        if item.payload.meta.get("part", "whole") in (part, "whole"):   # "whole": a message of every part
            row = aligned(item.payload.tensors, tensors, names, mine, row_units)
            if row is not None:
                rows.append(row)
    vector = malicious_vector(kind, np.vstack(rows), z=z, epsilon=epsilon, deviation=deviation,
                              liar_share=liar_share)
    return unflat(vector, tensors, names)
