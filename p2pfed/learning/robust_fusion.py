"""Combining models some of which may be poison: the rules ``algorithm.robust`` selects.

Each rule takes the candidate models as rows of one matrix (the device's own model first, then
its peers', each flattened over the shared parameters) with their sample-count weights, and
returns the combined row:

- ``median``: the coordinate-wise median (every model counts once);
- ``trimmed-mean``: the coordinate-wise mean after cutting ``trim_fraction`` of the values at each
  end (``scipy.stats.trim_mean``);
- ``krum``: Krum: each model's score is the sum of squared distances to its ``n - f - 2`` nearest
  other models, and the ``select`` best-scored models are averaged with their weights (one:
  Krum's single choice; more: the multi-Krum variant). ``f`` is the number of liars tolerated,
  lowered to ``(n - 3) // 2`` when fewer than ``2f + 3`` models are at hand;
- ``multi-krum``: Krum's scores, the ``n - f`` best-scored models averaged with their weights
  (``f`` lowered as for ``krum``);
- ``clip``: every peer's difference to the own model is scaled down to an L2 norm of at most
  ``clip_norm``, then the weighted mean is taken (a liar moves the result by a bounded amount):
  self-centred clipping at a fixed radius;
- ``clipped-gossip``: self-centred clipping (ClippedGossip, "Byzantine-Robust Decentralized
  Learning via ClippedGossip", He, Karimireddy and Jaggi, ICLR 2023) with a radius chosen per
  fusion from the peers' distances to the own model: the ``f + 1``-th largest (``f`` =
  ``byzantine``, lowered to the peers but one), so the ``f`` farthest peers are pulled in to the
  next one's distance. With ``f = 1``, the second largest, the rule of the authors' public
  implementation (``epfml/byzantine-robust-decentralized-optimizer``) when no radius is given;
- ``geometric-median``: the point minimising the sum of Euclidean distances to the models, each
  counting once, by the smoothed Weiszfeld iteration (from the mean, distances floored at
  ``WEISZFELD_FLOOR``, until a step moves less than ``WEISZFELD_TOLERANCE`` times 1 + the
  estimate's norm, or after ``WEISZFELD_STEPS`` steps), the robust baseline the ClippedGossip
  authors compare against (their ``RFA``): a liar moves it by a bounded amount whatever its
  distance.
"""

from __future__ import annotations

import numpy as np

RULES = ("median", "trimmed-mean", "krum", "multi-krum", "clip", "clipped-gossip", "geometric-median")
WEISZFELD_STEPS = 100     # at most; it stops once a step moves less than WEISZFELD_TOLERANCE
WEISZFELD_TOLERANCE = 1e-6
WEISZFELD_FLOOR = 1e-6


def combine(rows: np.ndarray, weights: np.ndarray, rule: str, *, trim_fraction: float = 0.2, byzantine: int = 1,
            select: int = 1, clip_norm: float = 1.0) -> np.ndarray:
    """The combined model (see the module), from ``rows`` (models × values, own first)."""
    if rule == "median":
        return np.asarray(np.median(rows, axis=0))
    if rule == "trimmed-mean":
        from scipy.stats import trim_mean   # imported when used: scipy.stats is slow to import

        return np.asarray(trim_mean(rows, trim_fraction, axis=0))
    if rule in ("krum", "multi-krum"):
        chosen = krum_choice(rows, byzantine, select if rule == "krum" else len(rows) - tolerated(len(rows), byzantine))
        return np.asarray(np.average(rows[chosen], axis=0, weights=weights[chosen]))
    if rule in ("clip", "clipped-gossip"):
        own, diffs = rows[0], rows[1:] - rows[0]
        norms = np.linalg.norm(diffs, axis=1, keepdims=True)
        tau = clip_norm if rule == "clip" else gossip_radius(rows, byzantine)
        scaled = diffs * np.minimum(1.0, tau / np.maximum(norms, 1e-12))
        return np.asarray(np.average(np.vstack([own, own + scaled]), axis=0, weights=weights))
    if rule == "geometric-median":
        return geometric_median(rows)
    raise ValueError(f"unknown robust rule {rule!r}; known: {', '.join(RULES)}")


def tolerated(n: int, byzantine: int) -> int:
    """Krum's ``f`` for ``n`` models: ``byzantine``, lowered to what ``n >= 2f + 3`` allows."""
    return min(byzantine, max((n - 3) // 2, 0))


def gossip_radius(rows: np.ndarray, byzantine: int) -> float:
    """``clipped-gossip``'s radius: the ``f + 1``-th largest distance of a peer row to the own
    (the first), ``f`` = ``byzantine`` lowered to the peers but one (0 without peers)."""
    distances = np.sort(np.linalg.norm(rows[1:] - rows[0], axis=1))[::-1]
    if distances.size == 0:
        return 0.0
    return float(distances[min(byzantine, distances.size - 1)])


def geometric_median(rows: np.ndarray) -> np.ndarray:
    """The smoothed Weiszfeld iteration toward the rows' geometric median, from their mean."""
    z = rows.mean(axis=0)
    for _ in range(WEISZFELD_STEPS):
        betas = 1.0 / np.maximum(np.linalg.norm(rows - z, axis=1), WEISZFELD_FLOOR)
        step = betas @ rows / betas.sum()
        moved = float(np.linalg.norm(step - z))
        z = step
        if moved <= WEISZFELD_TOLERANCE * (1.0 + float(np.linalg.norm(z))):
            break
    return np.asarray(z)


def krum_choice(rows: np.ndarray, byzantine: int, select: int) -> np.ndarray:
    """Indices of the ``select`` rows with the lowest Krum scores (ties: the earlier row)."""
    n = len(rows)
    f = tolerated(n, byzantine)
    neighbours = max(n - f - 2, 1)
    squared = squared_distances(rows)
    np.fill_diagonal(squared, np.inf)
    scores = np.sort(squared, axis=1)[:, :min(neighbours, n - 1)].sum(axis=1) if n > 1 else np.zeros(1)
    return np.argsort(scores, kind="stable")[:min(select, n)]


def squared_distances(rows: np.ndarray) -> np.ndarray:
    """Every pair of rows' squared Euclidean distance (rows × rows, 0 on the diagonal), one row's
    differences to the later rows at a time: the memory of rows × values, never rows² × values
    (large models), and each entry the same sum of squared differences, summed in the same order,
    as the whole difference array gives, so Krum's choice is the same to the last bit (ties
    included); the Gram-matrix identity would round differently."""
    n = len(rows)
    squared = np.zeros((n, n), dtype=(rows[:0] - rows[:0]).dtype)
    for i in range(n - 1):
        squared[i, i + 1:] = np.sum((rows[i + 1:] - rows[i]) ** 2, axis=1)
    return squared + squared.T


def set_aside(rows: np.ndarray, rule: str, *, byzantine: int = 1, select: int = 1, clip_norm: float = 1.0) -> int:
    """How many of the peer rows (all rows but the first, the own) ``rule`` left out (Krum: not
    selected) or shortened (clipping); 0 for the coordinate-wise rules and the geometric median,
    which drop no whole model.
    What a run reports to show a defence acting."""
    n = len(rows)
    if n < 2:
        return 0
    if rule in ("krum", "multi-krum"):
        return n - len(krum_choice(rows, byzantine, select if rule == "krum" else n - tolerated(n, byzantine)))
    if rule in ("clip", "clipped-gossip"):
        tau = clip_norm if rule == "clip" else gossip_radius(rows, byzantine)
        return int(np.count_nonzero(np.linalg.norm(rows[1:] - rows[0], axis=1) > tau))
    return 0


def masked_combine(values: np.ndarray, holds: np.ndarray, weights: np.ndarray, rule: str, *,
                   trim_fraction: float = 0.2, byzantine: int = 1, select: int = 1,
                   clip_norm: float = 1.0) -> tuple[np.ndarray, int, int]:
    """``combine`` where each model holds only some elements (pruned sub-models): ``values`` and
    ``holds`` are (models × elements), the first model the own. Elements with the same holders
    are combined together, over those holders only (the own model always among them where it
    holds the element; an element only one model holds keeps its value). Returns the combined
    elements (0 where nobody holds one), how many peer candidates ``set_aside`` counted, and how
    many peer candidates there were (each group counts its holders but the first)."""
    out = np.zeros(values.shape[1], dtype=np.float64)
    patterns, group = np.unique(holds.T, axis=0, return_inverse=True)
    group = group.reshape(-1)
    left_out = offered = 0
    for g, pattern in enumerate(patterns):
        who = np.flatnonzero(pattern)
        if who.size == 0:
            continue
        cols = np.flatnonzero(group == g)
        rows = values[np.ix_(who, cols)].astype(np.float64)
        if who.size == 1:
            out[cols] = rows[0]
            continue
        out[cols] = combine(rows, weights[who], rule, trim_fraction=trim_fraction, byzantine=byzantine,
                            select=select, clip_norm=clip_norm)
        left_out += set_aside(rows, rule, byzantine=byzantine, select=select, clip_norm=clip_norm)
        offered += who.size - 1
    return out, left_out, offered
