"""Clustering's one-problem path: K-means, the Davies–Bouldin index and the K sweep of one point
set at a time, as FedSub Sec. 3.2 states them — the reference the batched path the package runs
(``p2pfed.algorithms.fedsub.clustering.choose_k_by_dbi_many``) must equal exactly, and that
scikit-learn's ``KMeans`` / ``davies_bouldin_score`` check in turn. Only tests use it."""

from __future__ import annotations


import numpy as np

from p2pfed.algorithms.fedsub.clustering import (Clustering, _as_points, _check_sweep_params, _onehot,
                                                 _prepare_sweep, _single_threaded_blas, _Sweep, _trials)


def _sq_dists(x: np.ndarray, x_sq: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Squared distances (R, n, k) between the rows of ``x`` and each run's centers (R, k, d)."""
    c_sq = np.einsum("rkd,rkd->rk", centers, centers)
    d: np.ndarray = x_sq[None, :, None] - 2.0 * np.matmul(x, centers.transpose(0, 2, 1)) + c_sq[:, None, :]
    np.maximum(d, 0.0, out=d)
    return d


def _kmeanspp(x: np.ndarray, pair_sq: np.ndarray, k: int, runs: int,
              rng: np.random.Generator) -> np.ndarray:
    """Greedy k-means++ seeding (as in scikit-learn: best of 2+log k candidates per step) for
    ``runs`` restarts at once; returns the chosen row indices (runs, k).

    Seeds are always data points, so distances come from the precomputed ``pair_sq``. When all
    remaining mass is zero (fewer distinct points than k) a candidate is drawn uniformly.
    """
    n = x.shape[0]
    trials = _trials(k)
    chosen = np.empty((runs, k), dtype=np.intp)
    chosen[:, 0] = rng.integers(n, size=runs)
    closest = pair_sq[chosen[:, 0]].copy()  # (R, n)
    rows = np.arange(runs)
    for c in range(1, k):
        cums = np.cumsum(closest, axis=1)
        total = cums[:, -1:]
        u = rng.random((runs, trials))
        target = u * total
        cand = (cums[:, None, :] <= target[:, :, None]).sum(axis=2)
        # zero mass (all distinct points already seeds): uniform draw instead
        cand = np.where(total > 0.0, cand, np.floor(u * n).astype(np.intp))
        np.minimum(cand, n - 1, out=cand)
        pot = np.minimum(closest[:, None, :], pair_sq[cand])  # (R, T, n)
        best = np.argmin(pot.sum(axis=2), axis=1)
        chosen[:, c] = cand[rows, best]
        closest = pot[rows, best]
    return chosen


def _means(x: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-run cluster means (R, k, d) and sizes (R, k) for labels (R, n); empty clusters get 0."""
    onehot = _onehot(labels, k)   # (R, k, n)
    counts = onehot.sum(axis=2)
    sums = np.matmul(onehot, x)
    return sums / np.maximum(counts, 1.0)[:, :, None], counts


def kmeans(points: np.ndarray, k: int, *, seed: int = 0, n_init: int = 4, max_iter: int = 100,
           tol: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd K-means with greedy k-means++ seeding; returns ``(labels (n,), centers (k, d))``.

    The ``n_init`` restarts run as one batched computation (the sizes here are tiny, so Python
    overhead, not arithmetic, is the cost) and the lowest-inertia run wins, ties to the first.
    Deterministic for a given ``seed``. A cluster that becomes empty is re-seeded from the point
    farthest from all centres. With fewer than ``k`` distinct points some clusters necessarily
    stay empty: ``labels`` then uses fewer than ``k`` ids (unused ids get zero centres).
    ``tol`` is relative to the mean per-feature variance, like scikit-learn's.
    """
    x = _as_points(points)
    n = x.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..{n} for {n} points, got {k}")
    if n_init < 1 or max_iter < 1:
        raise ValueError("n_init and max_iter must be >= 1")
    with _single_threaded_blas():
        return _kmeans(x, k, seed, n_init, max_iter, tol)


def _kmeans(x: np.ndarray, k: int, seed: int, n_init: int, max_iter: int,
            tol: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`kmeans` on validated float64 points."""
    n = x.shape[0]
    rng = np.random.default_rng(seed)
    x_sq = np.einsum("nd,nd->n", x, x)
    pair_sq = np.maximum(x_sq[:, None] + x_sq[None, :] - 2.0 * (x @ x.T), 0.0)
    np.fill_diagonal(pair_sq, 0.0)
    tol_abs = tol * float(np.mean(np.var(x, axis=0)))

    centers = x[_kmeanspp(x, pair_sq, k, n_init, rng)]  # (R, k, d)
    labels = np.full((n_init, n), -1, dtype=np.intp)
    for _ in range(max_iter):
        d = _sq_dists(x, x_sq, centers)
        new_labels = np.argmin(d, axis=2)
        new_centers, counts = _means(x, new_labels, k)
        relocated = False
        for r in np.nonzero((counts == 0).any(axis=1))[0]:
            # rare: re-seed each empty cluster at the point farthest from every centre so far
            # (including the ones just re-seeded, so two empties don't land in the same spot)
            gap = d[r, np.arange(n), new_labels[r]].copy()
            for e in np.nonzero(counts[r] == 0)[0]:
                p = int(np.argmax(gap))
                if gap[p] <= 0.0:
                    break  # every point sits on a centre: fewer distinct points than k
                new_centers[r, e] = x[p]
                np.minimum(gap, pair_sq[p], out=gap)
                relocated = True
        shift = ((new_centers - centers) ** 2).sum(axis=(1, 2))
        done = bool(np.all((new_labels == labels).all(axis=1) | (shift <= tol_abs)))
        labels, centers = new_labels, new_centers
        if done and not relocated:
            break
    # final E-step so labels and centres agree, then pick the best restart
    d = _sq_dists(x, x_sq, centers)
    labels = np.argmin(d, axis=2)
    centers, counts = _means(x, labels, k)
    # sum_c sum_{x in c} |x - m_c|^2 = sum |x|^2 - sum_c n_c |m_c|^2
    inertia = x_sq.sum() - (counts * np.einsum("rkd,rkd->rk", centers, centers)).sum(axis=1)
    best = int(np.argmin(inertia))
    return labels[best].copy(), centers[best].copy()


def _dbi(x: np.ndarray, labels: np.ndarray, k: int) -> float:
    """DBI for validated float64 points and labels already in 0..k-1 (all non-empty)."""
    onehot = _onehot(labels, k)   # (k, n)
    counts = onehot.sum(axis=1)
    centroids = (onehot @ x) / counts[:, None]
    dist = np.sqrt(((x - centroids[labels]) ** 2).sum(axis=1))
    intra = (onehot @ dist) / counts
    # Gram form for the k x k centroid distances, as sklearn's euclidean_distances does
    c_sq = np.einsum("kd,kd->k", centroids, centroids)
    cdist = c_sq[:, None] + c_sq[None, :] - 2.0 * (centroids @ centroids.T)
    cdist = np.sqrt(np.maximum(cdist, 0.0))
    np.fill_diagonal(cdist, 0.0)
    # same degenerate-case rules as sklearn.metrics.davies_bouldin_score
    if np.all(np.isclose(intra, 0.0)) or np.all(np.isclose(cdist, 0.0)):
        return 0.0
    cdist[cdist == 0] = np.inf
    scores = np.max((intra[:, None] + intra[None, :]) / cdist, axis=1)
    return float(np.mean(scores))


def davies_bouldin(points: np.ndarray, labels: np.ndarray) -> float:
    """Davies–Bouldin index, matching ``sklearn.metrics.davies_bouldin_score`` without its
    per-call validation overhead (the DBI sweep calls it once per candidate K).

    Labels may be any integers; at least two distinct labels are required.
    """
    x = _as_points(points)
    lab = np.asarray(labels).ravel()
    if lab.shape[0] != x.shape[0]:
        raise ValueError(f"{lab.shape[0]} labels for {x.shape[0]} points")
    uniq, inv = np.unique(lab, return_inverse=True)
    if uniq.size < 2:
        raise ValueError("the Davies–Bouldin index needs at least two clusters")
    with _single_threaded_blas():
        return _dbi(x, inv.ravel(), uniq.size)


def choose_k_by_dbi(points: np.ndarray, *, k_min: int = 2, k_max: int | None = None,
                    seed: int = 0, n_init: int = 4, min_cluster_size: int = 1,
                    k_rule: str = "literal") -> Clustering:
    """Cluster one class's prototypes with K-means, K chosen to minimise the DBI (FedSub 3.2):
    one problem, with scikit-learn's KMeans and davies_bouldin_score. The K range, the rules
    (``literal``, ``min-size``, ``half``) and the small-set cases are those of
    ``p2pfed.algorithms.fedsub.clustering.choose_k_by_dbi_many``, which the tests hold equal to
    this function problem by problem."""
    _check_sweep_params(k_min, k_max, n_init, k_rule)
    prepared = _prepare_sweep(points, k_max)
    if isinstance(prepared, Clustering):
        return prepared
    sweep = _Sweep(*prepared, min_cluster_size=min_cluster_size, k_rule=k_rule)
    with _single_threaded_blas():
        for k in range(k_min, sweep.hi + 1):
            lab, _ = _kmeans(sweep.xs, k, seed, n_init, 100, 1e-6)
            sweep.offer(k, lab, lambda: _dbi(sweep.xs, lab, k))
    return sweep.result()

