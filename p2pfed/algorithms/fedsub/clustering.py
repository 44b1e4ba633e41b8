"""Class-level prototype clustering for FedSub (paper Sec. 3.2): K-means with K chosen by DBI.

In the serverless setting every device clusters its own and its cached peers' prototypes for
every class in every round, so this runs far more often than on FedSub's single server. It is
therefore a small, vectorised numpy implementation (all ``n_init`` restarts run as one batch)
instead of scikit-learn, whose per-call overhead dominates at these sizes (tens of prototypes);
scikit-learn stays the reference the tests compare against, through the one-problem path in
``tests/reference_clustering.py``, which this batched one equals exactly. :class:`ClusteringCache` memoises
results on content, because devices holding the same prototype set would otherwise redo the
same sweep.
"""

from __future__ import annotations

import functools
import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from p2pfed.algorithms.base import ComputeNow

SWEEP_CHUNK = 256   # problems of one size swept as one stacked computation


@dataclass(frozen=True)
class Clustering:
    """Chosen partition of one class's prototypes.

    ``labels`` are numbered by first appearance in the input rows (row 0 is in cluster 0), so two
    equal partitions compare equal. ``dbi`` is the Davies–Bouldin index of the chosen K, ``None``
    when no K >= 2 could be tried (DBI is undefined for a single cluster). ``labels`` is
    read-only because :class:`ClusteringCache` hands the same object to several callers.
    """

    labels: np.ndarray
    k: int
    dbi: float | None
    dbi_by_k: dict[int, float] = field(default_factory=dict)
    # The K the paper's literal rule (minimum DBI over the whole sweep) picks on the same points,
    # reported next to ``k`` whichever rule chose it (1 when no K >= 2 could be tried).
    literal_k: int = 1
    # The sweep's arithmetic on a device of its own (its distance computations: k-means++
    # candidates, every Lloyd iteration it ran, the final assignment; 2 FLOPs a multiply-add),
    # what a device that models its compute is charged for it (a cached answer costs the same).
    flops: float = field(default=0.0, compare=False)


# --------------------------------------------------------------------------------------------
# helpers

_blas_lock = threading.Lock()
_blas_depth = 0
_blas_limiter: Any = None
_blas_controller: Any = None


@contextmanager
def _single_threaded_blas() -> Iterator[None]:
    """Run numpy's BLAS single-threaded while clustering.

    The products here are tiny (tens x hundreds); with OpenBLAS's default threads they gain
    nothing and, when the cores are busy (other devices training), its spinning threads made the
    36x512 sweep ~60x slower (2.8 s instead of 45 ms, measured). scikit-learn's KMeans does the
    same. The BLAS thread count is process-wide, so concurrent callers share one limit,
    reference-counted, and the original setting is restored when the last one leaves.
    """
    global _blas_depth, _blas_limiter, _blas_controller
    with _blas_lock:
        if _blas_depth == 0:
            try:
                from threadpoolctl import ThreadpoolController

                if _blas_controller is None:
                    _blas_controller = ThreadpoolController()
                _blas_limiter = _blas_controller.limit(limits=1, user_api="blas")
            except Exception:  # threadpoolctl missing/old: run with whatever BLAS does
                _blas_limiter = None
        _blas_depth += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_depth -= 1
            if _blas_depth == 0 and _blas_limiter is not None:
                _blas_limiter.restore_original_limits()
                _blas_limiter = None


def _as_points(points: np.ndarray) -> np.ndarray:
    """Validate and convert to a C-contiguous float64 (n, d) array (all maths runs in float64)."""
    x = np.asarray(points)
    if x.ndim != 2:
        raise ValueError(f"points must be a 2-D array (n, d), got shape {x.shape}")
    x = np.ascontiguousarray(x, dtype=np.float64)
    if not np.isfinite(x).all():
        raise ValueError("points must be finite")
    return x


def _onehot(labels: np.ndarray, k: int) -> np.ndarray:
    """Float indicators (..., k, n) of labels (..., n): one comparison, no scatter."""
    return cast(np.ndarray, (labels[..., None, :] == np.arange(k)[:, None]).astype(np.float64))


# --------------------------------------------------------------------------------------------
# the sweep of one class's prototypes


def _lexicographic_order(x: np.ndarray) -> np.ndarray:
    """Row order sorting ``x`` lexicographically (first column first), stable: the order of
    ``np.lexsort(x.T[::-1])``, whose one pass per column cost ~0.6 ms at 512 columns. When the
    first column has no ties (the usual case) its stable argsort is that order; otherwise Python
    compares the rows as lists, element by element, stopping at the first difference."""
    if x.shape[0] == 0 or x.shape[1] == 0:
        return np.arange(x.shape[0], dtype=np.intp)
    order = np.argsort(x[:, 0], kind="stable")
    first = x[order, 0]
    if bool((first[1:] > first[:-1]).all()):
        return order.astype(np.intp, copy=False)
    rows = x.tolist()
    return np.array(sorted(range(len(rows)), key=rows.__getitem__), dtype=np.intp)


def _first_appearance(labels: np.ndarray) -> np.ndarray:
    """Renumber cluster ids in order of first appearance (makes equal partitions equal arrays)."""
    uniq, first = np.unique(labels, return_index=True)
    remap = np.empty(int(uniq[-1]) + 1, dtype=np.intp)
    remap[uniq] = np.argsort(np.argsort(first))
    return cast(np.ndarray, remap[labels])


def _one_cluster(n: int) -> Clustering:
    labels = np.zeros(n, dtype=np.intp)
    labels.setflags(write=False)
    return Clustering(labels=labels, k=1, dbi=None, dbi_by_k={})


K_RULES = ("min-size", "half", "literal")


def _check_sweep_params(k_min: int, k_max: int | None, n_init: int, k_rule: str) -> None:
    if k_min < 2:
        raise ValueError(f"k_min must be >= 2, got {k_min}")
    if k_max is not None and k_max < k_min:
        raise ValueError(f"k_max ({k_max}) must be >= k_min ({k_min})")
    if n_init < 1:
        raise ValueError(f"n_init must be >= 1, got {n_init}")
    if k_rule not in K_RULES:
        raise ValueError(f"unknown k_rule {k_rule!r}; choose one of {', '.join(K_RULES)}")


def _prepare_sweep(points: np.ndarray, k_max: int | None
                   ) -> Clustering | tuple[np.ndarray, np.ndarray, int]:
    """The answer for sets too small or degenerate to sweep, else (canonical order, rows in that
    order, the largest K to try); see :func:`choose_k_by_dbi_many` for the rule."""
    x = _as_points(points)
    n = x.shape[0]
    if n == 0:
        raise ValueError("cannot cluster an empty set of prototypes")
    if n <= 2:
        return _one_cluster(n)
    order = _lexicographic_order(x)
    xs = x[order]
    n_distinct = 1 + int(np.count_nonzero((xs[1:] != xs[:-1]).any(axis=1)))
    if n_distinct == 1:
        return _one_cluster(n)
    hi = min(n - 1 if k_max is None else k_max, n - 1, n_distinct)
    return order, xs, hi


class _Sweep:
    """The running choice of one K sweep under each K rule (see :func:`choose_k_by_dbi_many`): the
    minimum DBI over every K (literal), over the K with no cluster below ``min_cluster_size``
    (min-size), and over K <= n/2 (half); the smallest K wins ties (K is offered in order)."""

    def __init__(self, order: np.ndarray, xs: np.ndarray, hi: int, *, min_cluster_size: int,
                 k_rule: str) -> None:
        self.order, self.xs, self.hi = order, xs, hi
        self.k_rule = k_rule
        self.min_size = min_cluster_size if k_rule == "min-size" else 1
        self.best: tuple[float, int, np.ndarray] | None = None           # over every K (literal)
        self.best_sized: tuple[float, int, np.ndarray] | None = None     # over K with no small cluster
        self.best_half: tuple[float, int, np.ndarray] | None = None      # over K <= n/2
        self.dbi_by_k: dict[int, float] = {}
        self.flops = 0.0

    def offer(self, k: int, lab: np.ndarray, dbi: Callable[[], float]) -> None:
        """Consider K's labels; ``dbi`` is called only if all K clusters are non-empty."""
        sizes = np.bincount(lab)
        if np.count_nonzero(sizes) < k:
            return
        self.offer_full(k, lab, int(sizes[sizes > 0].min()), dbi())

    def offer_full(self, k: int, lab: np.ndarray, smallest: int, score: float) -> None:
        """Consider K's labels, all K clusters non-empty: the smallest has ``smallest`` members,
        the DBI is ``score`` (``offer`` with the sizes and the index known already)."""
        self.dbi_by_k[k] = score
        n = self.xs.shape[0]
        if self.best is None or score < self.best[0]:
            self.best = (score, k, lab)
        if smallest >= self.min_size and (self.best_sized is None or score < self.best_sized[0]):
            self.best_sized = (score, k, lab)
        if n > 3 and k <= n // 2 and (self.best_half is None or score < self.best_half[0]):
            self.best_half = (score, k, lab)

    def result(self) -> Clustering:
        n = self.xs.shape[0]
        if self.best is None:
            return _one_cluster(n)
        chosen = {"literal": self.best, "min-size": self.best_sized, "half": self.best_half}[self.k_rule]
        if chosen is None:
            return Clustering(labels=_one_cluster(n).labels, k=1, dbi=None, dbi_by_k=self.dbi_by_k,
                              literal_k=self.best[1], flops=self.flops)
        best_dbi, best_k, best_labels = chosen
        labels = np.empty(n, dtype=np.intp)
        labels[self.order] = best_labels
        labels = _first_appearance(labels)
        labels.setflags(write=False)
        return Clustering(labels=labels, k=best_k, dbi=best_dbi, dbi_by_k=self.dbi_by_k, literal_k=self.best[1],
                          flops=self.flops)


class ClusteringCache:
    """Memoises :func:`choose_k_by_dbi_many` on the exact content (bytes of the points array +
    params) — an LRU of bounded size.

    Devices that hold the same prototype set (common once caches converge) then share one
    sweep, also while it is still being computed. Keys are a BLAKE2b digest of dtype, shape and
    bytes, so memory stays bounded by ``maxsize`` results rather than by the prototypes
    themselves. The returned :class:`Clustering` is shared: treat it (including ``dbi_by_k``) as
    read-only. Misses go to the device's ``ctx.offload`` (``submit_many``): computed when first
    asked for, together with every other device's waiting sweeps, or ahead in a helper process.
    """

    def __init__(self, maxsize: int = 4096) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be >= 1")
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._store: OrderedDict[tuple[Any, ...], Clustering] = OrderedDict()
        # contents sent off and not collected yet: key -> (their request's future, index in it)
        self._pending: dict[tuple[Any, ...], tuple[Any, int]] = {}
        # the same, by request: id(future) -> its keys, so that collecting one request does not
        # scan every pending content (10,000 devices leave tens of thousands pending)
        self._keys_of: dict[int, list[tuple[Any, ...]]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._store)

    def reserve(self, entries: int) -> None:
        """Grow the bound by ``entries``: each device that shares the cache reserves room for
        its own class problems. A round visits every (device, class) problem in the same order,
        the worst case for an LRU smaller than that working set: at 1,000 devices x 6 classes
        a fixed bound of 4,096 missed on every lookup."""
        if entries < 0:
            raise ValueError("entries must be >= 0")
        with self._lock:
            self.maxsize += entries

    @staticmethod
    def _key(points: np.ndarray, params: dict[str, Any]) -> tuple[Any, ...]:
        arr = np.ascontiguousarray(points)
        digest = hashlib.blake2b(arr.tobytes(), digest_size=20).digest()
        return (arr.dtype.str, arr.shape, digest, tuple(sorted(params.items())))

    def cluster_many(self, point_sets: Sequence[np.ndarray], **params: Any) -> list[Clustering]:
        """The clustering of each point set, now (misses computed here in one call)."""
        return self.cluster_many_later(point_sets, _NOW, **params).result()

    def cluster(self, points: np.ndarray, **params: Any) -> Clustering:
        """The clustering of one point set, now."""
        return self.cluster_many([points], **params)[0]

    def cluster_many_later(self, point_sets: Sequence[np.ndarray], offload: Any, **params: Any) -> Clusterings:
        """The clustering of each point set, answered by ``result()``: cached contents from the
        cache, contents already sent off by anyone from their request, and the other distinct
        contents sent to ``offload`` now as one ``choose_k_by_dbi_many`` request."""
        keys = [self._key(p, params) for p in point_sets]
        found: dict[tuple[Any, ...], Clustering] = {}
        todo: dict[tuple[Any, ...], np.ndarray] = {}
        with self._lock:
            for key, points in zip(keys, point_sets):
                hit = found.get(key) or self._store.get(key)
                if hit is not None:
                    if key in self._store:
                        self._store.move_to_end(key)
                    found[key] = hit
                    self.hits += 1
                elif key in todo or key in self._pending:
                    self.hits += 1  # computed once
                else:
                    todo[key] = points
        if todo:
            future = offload.submit_many(choose_k_by_dbi_many, list(todo.values()), **params)
            with self._lock:
                for j, key in enumerate(todo):
                    self._pending[key] = (future, j)
                self._keys_of[id(future)] = list(todo)
        waiting = {key: self._pending[key] for key in keys if key not in found}
        return Clusterings(self, keys, found, waiting)

    def _collect(self, future: Any) -> None:
        """A request's results into the cache (once), out of the pending ones."""
        results = future.result()
        with self._lock:
            for key in self._keys_of.pop(id(future), []):
                self.misses += 1
                self._store[key] = results[self._pending.pop(key)[1]]
                self._store.move_to_end(key)
            while len(self._store) > self.maxsize:
                self._store.popitem(last=False)


class Clusterings:
    """The clusterings ``ClusteringCache.cluster_many_later`` promised; ``result()`` collects them."""

    def __init__(self, cache: ClusteringCache, keys: list[tuple[Any, ...]],
                 found: dict[tuple[Any, ...], Clustering], waiting: dict[tuple[Any, ...], tuple[Any, int]]) -> None:
        self._cache, self._keys, self._found, self._waiting = cache, keys, found, waiting

    def result(self) -> list[Clustering]:
        for key, (future, j) in list(self._waiting.items()):
            if key in self._cache._pending:
                self._cache._collect(future)
            self._found[key] = future.result()[j]
            del self._waiting[key]
        return [self._found[key] for key in self._keys]


_NOW = ComputeNow()


# --------------------------------------------------------------------------------------------
# many problems at once


def choose_k_by_dbi_many(point_sets: Sequence[np.ndarray], *, k_min: int = 2,
                         k_max: int | None = None, seed: int = 0, n_init: int = 4,
                         min_cluster_size: int = 1, k_rule: str = "literal") -> list[Clustering]:
    """Cluster each class's prototypes with K-means, K chosen to minimise the DBI (FedSub 3.2),
    for every point set (same dimension, any sizes) in one batched computation.

    The sweep always runs K over ``[k_min, min(k_max or n-1, n-1, #distinct points)]`` (a K
    whose clustering has fewer than K non-empty clusters is skipped); ``k_rule`` says which of
    those partitions may win, the smallest K attaining the minimum DBI among them:

    * ``literal`` — every K (the journal's text, Sec. 3.2; ``min_cluster_size`` is ignored). A
      singleton cluster has zero scatter, so on noisy data the DBI keeps falling as K → n-1 and
      this rule splits every structure into singletons;
    * ``min-size`` — only partitions whose clusters all have >= ``min_cluster_size`` members;
      when there is none (e.g. n <= 3 for size 2), a single cluster;
    * ``half`` — only K <= floor(n/2); a single cluster when n <= 3.

    Small or degenerate sets: n == 0 → ``ValueError``; n <= 2, all points identical, or an empty
    sweep → a single cluster. The result depends on the *set* of rows, not their order: rows are
    clustered in a canonical (lexicographic) order and labels mapped back, so peers stacking the
    same prototypes in different orders agree on the partition. Deterministic for a given ``seed``.
    Element ``i`` of the result equals the one-problem reference
    (``tests/reference_clustering.choose_k_by_dbi``) on ``point_sets[i]``.

    Problems are grouped by their number of rows n, and for each K every problem of a group
    runs its K-means restarts and its DBI as one stacked computation. Problems are *not*
    padded to a common n: numpy's pairwise sums and BLAS's blocking depend on the length
    of what they reduce, so padding would change the last bits and, at near-ties, the chosen K.
    Unpadded, each problem's arithmetic is the same sequence of operations on the same shapes as
    the one-problem path (the random draws too: they depend only on ``seed``, n and K), so the
    results are equal, not merely close. The cost that goes is the Python overhead per
    (problem, K, iteration), which dominates at these sizes (tens of rows). A group runs in
    chunks of at most ``SWEEP_CHUNK`` problems, so that the sweep's temporary arrays stay
    bounded however many devices cluster at one instant (a synchronous round's first fusion).
    """
    _check_sweep_params(k_min, k_max, n_init, k_rule)
    results: list[Clustering | None] = [None] * len(point_sets)
    sweeps: dict[int, list[tuple[int, _Sweep]]] = {}
    dim: int | None = None
    for i, points in enumerate(point_sets):
        prepared = _prepare_sweep(points, k_max)
        if isinstance(prepared, Clustering):
            results[i] = prepared
            continue
        sweep = _Sweep(*prepared, min_cluster_size=min_cluster_size, k_rule=k_rule)
        if dim is not None and sweep.xs.shape[1] != dim:
            raise ValueError(f"point set {i} has {sweep.xs.shape[1]} columns, the others {dim}")
        dim = sweep.xs.shape[1]
        sweeps.setdefault(sweep.xs.shape[0], []).append((i, sweep))
    with _single_threaded_blas():
        for group in sweeps.values():
            for first in range(0, len(group), SWEEP_CHUNK):   # at most SWEEP_CHUNK problems' arrays at once
                chunk = group[first:first + SWEEP_CHUNK]
                _sweep_group([s for _, s in chunk], k_min, seed, n_init)
                for i, sweep in chunk:
                    results[i] = sweep.result()
    return results  # type: ignore[return-value]


@dataclass
class _Stack:
    """Problems with the same n, stacked: points (B, n, d) and what the one-problem path
    precomputes per problem (|x|^2, pairwise squared distances, absolute tolerance)."""

    x: np.ndarray
    x_sq: np.ndarray
    pair_sq: np.ndarray
    tol_abs: np.ndarray

    def take(self, rows: np.ndarray) -> _Stack:
        return _Stack(self.x[rows], self.x_sq[rows], self.pair_sq[rows], self.tol_abs[rows])


def _stack(xs: list[np.ndarray], tol: float) -> _Stack:
    # per problem, exactly as the one-problem reference's _kmeans computes them (one call each, not per K)
    x_sq, pair_sq, tol_abs = [], [], []
    for x in xs:
        sq = np.einsum("nd,nd->n", x, x)
        pair = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (x @ x.T), 0.0)
        np.fill_diagonal(pair, 0.0)
        x_sq.append(sq)
        pair_sq.append(pair)
        tol_abs.append(tol * float(np.mean(np.var(x, axis=0))))
    return _Stack(np.stack(xs), np.stack(x_sq), np.stack(pair_sq), np.array(tol_abs))


def _sweep_group(sweeps: list[_Sweep], k_min: int, seed: int, n_init: int) -> None:
    """Offer every K to every sweep of one n, each K computed for all of them at once."""
    stack = _stack([s.xs for s in sweeps], 1e-6)
    his = np.array([s.hi for s in sweeps])
    ks = range(k_min, int(his.max()) + 1)
    seedings = _seedings(stack, ks, seed, n_init)
    for k in ks:
        rows = np.flatnonzero(his >= k)
        part = stack if rows.size == len(sweeps) else stack.take(rows)
        labels, iterations = _kmeans_stack(part, k, seedings[k][rows], 100)
        n, d = part.x.shape[1:]
        per_pass = 2.0 * n * k * d * seedings[k].shape[1]   # one assignment pass of every restart
        trials = _trials(k)
        for r, iters in zip(rows.tolist(), iterations.tolist()):
            sweeps[r].flops += per_pass * (trials + iters + 1)
        counts = _counts(labels, k)
        full = np.flatnonzero((counts > 0).all(axis=1))  # every cluster used: DBI is defined
        scores = _dbi_stack(part.x[full], labels[full], k).tolist()
        smallest = counts[full].min(axis=1).tolist()     # the clusters are all non-empty
        for j, score, least in zip(full.tolist(), scores, smallest):
            sweeps[rows[j]].offer_full(k, labels[j], least, score)


def _seedings(st: _Stack, ks: range, seed: int, runs: int) -> dict[int, np.ndarray]:
    """The k-means++ seeds (B, runs, K) of every K of a sweep, from one seeding per number of
    candidate trials: greedy seeding picks centre c from the draws of steps 1..c only, and
    those draws are the same for every K with the same trial count (:func:`_seeding_draws`),
    so K's seeds are the first K of the largest such K's. Same seeds, a fraction of the steps."""
    by_trials: dict[int, list[int]] = {}
    for k in ks:
        by_trials.setdefault(_trials(k), []).append(k)
    out: dict[int, np.ndarray] = {}
    for same in by_trials.values():
        chosen = _kmeanspp_stack(st, same[-1], seed, runs)
        for k in same:
            out[k] = chosen[:, :, :k]
    return out


def _counts(labels: np.ndarray, k: int) -> np.ndarray:
    """Cluster sizes (..., k) of labels (..., n)."""
    flat = labels.reshape(-1, labels.shape[-1])
    offs = (np.arange(flat.shape[0]) * k)[:, None]
    counts = np.bincount((flat + offs).ravel(), minlength=flat.shape[0] * k)
    return counts.reshape(*labels.shape[:-1], k)


def _trials(k: int) -> int:
    """Candidates per k-means++ step for K centres (scikit-learn's 2 + log K)."""
    return 2 + int(math.log(k))


@functools.lru_cache(maxsize=512)
def _seeding_draws(seed: int, n: int, k: int, runs: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The random numbers :func:`_kmeanspp` draws for (seed, n, k): the first seeds and, for each
    further centre, the candidates' uniforms. They depend on nothing else, so every problem of
    one n shares them (and they are remembered: read-only)."""
    rng = np.random.default_rng(seed)
    first = rng.integers(n, size=runs)
    uniforms = tuple(rng.random((runs, _trials(k))) for _ in range(1, k))
    for a in (first, *uniforms):
        a.setflags(write=False)
    return first, uniforms


def _kmeanspp_stack(st: _Stack, k: int, seed: int, runs: int) -> np.ndarray:
    """:func:`_kmeanspp` for B problems at once; chosen row indices (B, runs, k)."""
    b_count, n = st.x_sq.shape
    first, uniforms = _seeding_draws(seed, n, k, runs)
    bi = np.arange(b_count)[:, None]
    chosen = np.empty((b_count, runs, k), dtype=np.intp)
    chosen[:, :, 0] = first[None, :]
    closest = st.pair_sq[bi, chosen[:, :, 0]]  # (B, R, n)
    rows = np.arange(runs)[None, :]
    for c in range(1, k):
        u = uniforms[c - 1]
        cums = np.cumsum(closest, axis=2)
        total = cums[:, :, -1:]
        target = u[None] * total
        cand = (cums[:, :, None, :] <= target[:, :, :, None]).sum(axis=3)
        cand = np.where(total > 0.0, cand, np.floor(u * n).astype(np.intp)[None])
        np.minimum(cand, n - 1, out=cand)
        pot = np.minimum(closest[:, :, None, :], st.pair_sq[bi[:, :, None], cand])  # (B, R, T, n)
        best = np.argmin(pot.sum(axis=3), axis=2)
        chosen[:, :, c] = cand[bi, rows, best]
        closest = pot[bi, rows, best]
    return chosen


def _sq_dists_stack(st: _Stack, centers: np.ndarray) -> np.ndarray:
    """:func:`_sq_dists` per problem: (B, R, n, k)."""
    b_count, runs, k, d = centers.shape
    c_sq = np.einsum("rkd,rkd->rk", centers.reshape(-1, k, d),
                     centers.reshape(-1, k, d)).reshape(b_count, runs, k)
    # x_sq - 2 x.c + c_sq, evaluated in that order (as _sq_dists), in place
    dist: np.ndarray = np.matmul(st.x[:, None], centers.transpose(0, 1, 3, 2))
    np.multiply(dist, 2.0, out=dist)
    np.subtract(st.x_sq[:, None, :, None], dist, out=dist)
    np.add(dist, c_sq[:, :, None, :], out=dist)
    np.maximum(dist, 0.0, out=dist)
    return dist


def _means_stack(x: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_means` per problem: means (B, R, k, d) and sizes (B, R, k)."""
    onehot = _onehot(labels, k)   # (B, R, k, n)
    counts = onehot.sum(axis=3)
    sums = np.matmul(onehot, x[:, None])
    return np.divide(sums, np.maximum(counts, 1.0)[..., None], out=sums), counts


def _kmeans_stack(st: _Stack, k: int, seeds: np.ndarray, max_iter: int) -> tuple[np.ndarray, np.ndarray]:
    """The one-problem reference's ``_kmeans`` for B problems of one n from their k-means++ seeds (B, n_init, k) (see
    :func:`_seedings`); the best restart's labels (B, n) and each problem's Lloyd iterations (B,).

    Each problem stops iterating when it would alone (all its restarts done, none relocated):
    its later iterations would differ from the one-problem path's, which stopped.
    """
    b_count, n = st.x_sq.shape
    bi = np.arange(b_count)[:, None]
    centers = st.x[bi[:, :, None], seeds]  # (B, R, k, d)
    labels = np.full((b_count, seeds.shape[1], n), -1, dtype=np.intp)
    live = np.arange(b_count)
    iterations = np.zeros(b_count, dtype=np.intp)
    for _ in range(max_iter):
        iterations[live] += 1
        sub = st if live.size == b_count else st.take(live)
        cen, lab = centers[live], labels[live]
        d = _sq_dists_stack(sub, cen)
        new_labels = np.argmin(d, axis=3)
        new_centers, counts = _means_stack(sub.x, new_labels, k)
        relocated = np.zeros(live.size, dtype=bool)
        for b, r in zip(*np.nonzero((counts == 0).any(axis=2))):
            # as in the reference's _kmeans: re-seed each empty cluster at the point farthest from every centre
            gap = d[b, r, np.arange(n), new_labels[b, r]].copy()
            for e in np.nonzero(counts[b, r] == 0)[0]:
                p = int(np.argmax(gap))
                if gap[p] <= 0.0:
                    break
                new_centers[b, r, e] = sub.x[b, p]
                np.minimum(gap, sub.pair_sq[b, p], out=gap)
                relocated[b] = True
        diff = np.subtract(new_centers, cen, out=cen)  # cen is a copy: reuse its memory
        shift = np.square(diff, out=diff).sum(axis=(2, 3))
        done = np.all((new_labels == lab).all(axis=2) | (shift <= sub.tol_abs[:, None]), axis=1)
        labels[live], centers[live] = new_labels, new_centers
        live = live[~(done & ~relocated)]
        if live.size == 0:
            break
    d = _sq_dists_stack(st, centers)
    labels = np.argmin(d, axis=3)
    centers, counts = _means_stack(st.x, labels, k)
    b_count, runs = counts.shape[:2]
    c_sq = np.einsum("rkd,rkd->rk", centers.reshape(-1, k, centers.shape[3]),
                     centers.reshape(-1, k, centers.shape[3])).reshape(b_count, runs, k)
    inertia = st.x_sq.sum(axis=1)[:, None] - (counts * c_sq).sum(axis=2)
    best = np.argmin(inertia, axis=1)
    return cast(np.ndarray, labels[np.arange(b_count), best]), iterations


def _dbi_stack(x: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """The one-problem reference's ``_dbi`` per problem for points (B, n, d) and labels (B, n) using all of 0..k-1."""
    b_count, n, d = x.shape
    if b_count == 0:
        return np.empty(0)
    onehot = _onehot(labels, k)   # (B, k, n)
    counts = onehot.sum(axis=2)
    centroids = np.matmul(onehot, x) / counts[:, :, None]
    gathered = centroids[np.arange(b_count)[:, None], labels]
    dist = np.sqrt(((x - gathered) ** 2).sum(axis=2))
    intra = np.matmul(onehot, dist[:, :, None])[:, :, 0] / counts
    c_sq = np.einsum("kd,kd->k", centroids.reshape(-1, d), centroids.reshape(-1, d)).reshape(b_count, k)
    cdist = c_sq[:, :, None] + c_sq[:, None, :] - 2.0 * np.matmul(centroids, centroids.transpose(0, 2, 1))
    cdist = np.sqrt(np.maximum(cdist, 0.0))
    cdist[:, np.arange(k), np.arange(k)] = 0.0
    # np.isclose(a, 0.0) is |a| <= 1e-8 (its atol), without its per-call overhead
    degenerate = (np.abs(intra) <= 1e-8).all(axis=1) | (np.abs(cdist) <= 1e-8).all(axis=(1, 2))
    cdist[cdist == 0] = np.inf
    scores = np.max((intra[:, :, None] + intra[:, None, :]) / cdist, axis=2)
    return np.where(degenerate, 0.0, scores.mean(axis=1))
