"""FedAli's Alignment with Prototypes (ALP) layer (Ek et al., "FedAli: Personalized Federated
Learning with Aligned Prototypes through Optimal Transport", Sec. 3.1 and Appendix A).

An embedding is matched to learnable prototypes by an entropic optimal-transport plan
(Sinkhorn-Knopp, Eq. 4), pulled toward its matched prototype through a GLU (Eq. 6-7) and
L2-normalised. In training the plan covers the local and the global prototypes together (Eq. 3):
embeddings are aligned to their hard-assigned *global* prototype and the local prototypes follow
their soft-assigned embeddings by an exponential moving average (Eq. 5). In inference only the
local prototypes are used. The prototypes are buffers, never trained by gradients (the paper's
stop-gradient); only the GLU's weights are.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from p2pfed.learning.model import MLP


@torch.no_grad()
def sinkhorn_plan(similarity: torch.Tensor, epsilon: float, iterations: int) -> torch.Tensor:
    """The entropic transport plan between the rows (embeddings) and the columns (prototypes) of
    a similarity matrix, with uniform marginals 1/N and 1/K, after ``iterations`` Sinkhorn-Knopp
    sweeps started from exp(similarity / ε) (Eq. 4).

    Each sweep scales the rows, then the columns, as the paper's pseudo-code does, so the column
    marginals are exact and the row marginals approach theirs as sweeps are added. This equals
    POT's ``ot.sinkhorn(1/K, 1/N, -similarity.T, ε, numItermax=iterations).T`` (a test checks it).
    Computed in float64, with each row's maximum subtracted before exp (a row scaling, which the
    first sweep removes), so a small ε cannot overflow.
    """
    s = similarity.detach().to(torch.float64)
    plan = torch.exp((s - s.max(dim=1, keepdim=True).values) / epsilon)
    n, k = plan.shape
    tiny = torch.finfo(torch.float64).tiny
    for _ in range(iterations):
        plan = plan / plan.sum(dim=1, keepdim=True).clamp_min(tiny) / n
        plan = plan / plan.sum(dim=0, keepdim=True).clamp_min(tiny) / k
    return plan


def marginal_error(plan: torch.Tensor) -> float:
    """Largest relative deviation of the plan's row or column sums from uniform (0: exactly
    doubly stochastic once scaled)."""
    n, k = plan.shape
    rows = (plan.sum(dim=1) * n - 1).abs().max()
    cols = (plan.sum(dim=0) * k - 1).abs().max()
    return float(torch.maximum(rows, cols))


class ALPLayer(nn.Module):
    """Aligns a batch of embeddings (N, d) to ``num_prototypes`` local and global prototypes.

    ``generator`` draws the initial prototypes and GLU weights; every device passes one seeded
    alike, so all start from the same layer, as a server's first broadcast would give them.
    """

    local_prototypes: torch.Tensor    # buffers, registered in __init__
    global_prototypes: torch.Tensor

    def __init__(self, dim: int, num_prototypes: int, *, beta: float, gamma: float, epsilon: float,
                 iterations: int, generator: torch.Generator) -> None:
        super().__init__()
        self.beta, self.gamma, self.epsilon, self.iterations = beta, gamma, epsilon, iterations
        self.glu = nn.Linear(dim, 2 * dim)   # GLU(p) = a ⊙ σ(b), [a, b] = W p + c (Dauphin et al.)
        bound = 1.0 / math.sqrt(dim)          # nn.Linear's default init, from our generator
        with torch.no_grad():
            self.glu.weight.uniform_(-bound, bound, generator=generator)
            self.glu.bias.uniform_(-bound, bound, generator=generator)
        protos = F.normalize(torch.randn(num_prototypes, dim, generator=generator), dim=1)
        self.register_buffer("local_prototypes", protos.clone())
        self.register_buffer("global_prototypes", protos.clone())
        self.last_marginal_error = float("nan")   # of the latest training plan (3 sweeps: not 0)
        self.last_global_used: set[int] = set()   # global prototypes assigned since reset_usage

    @property
    def num_prototypes(self) -> int:
        return int(self.local_prototypes.shape[0])

    def reset_usage(self) -> None:
        self.last_global_used = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.num_prototypes
        x_norm = F.normalize(x, dim=1)
        active = (torch.cat([self.local_prototypes, self.global_prototypes]) if self.training
                  else self.local_prototypes)                                            # Eq. 3
        plan = sinkhorn_plan(x_norm.detach() @ F.normalize(active, dim=1).T, self.epsilon, self.iterations)
        if self.training:
            self.last_marginal_error = marginal_error(plan)
            assigned = plan[:, g:].argmax(dim=1)
            self.last_global_used.update(int(i) for i in assigned.unique())  # type: ignore[no-untyped-call]
            matched = self.global_prototypes[assigned]
            self._follow(x_norm.detach(), plan[:, :g])
        else:
            matched = self.local_prototypes[plan.argmax(dim=1)]
        aligned = self.beta * F.glu(self.glu(matched.detach()), dim=-1) + (1 - self.beta) * x  # Eq. 6-7
        return F.normalize(aligned, dim=1)

    @torch.no_grad()
    def _follow(self, x_norm: torch.Tensor, local_plan: torch.Tensor) -> None:
        """Eq. 5, once per training forward pass (a batch), where App. A's pseudo-code updates
        P_local: each local prototype moves toward x̂_g, the average of its ⌈N/G⌉ best-matched
        embeddings weighted by their plan values normalised to sum to 1 (Sec. 3.1, "weighted
        averaging on the normalized similarity value"; the released code normalises the same way)."""
        per_prototype = local_plan.T                                           # (G, N)
        k = min(math.ceil(x_norm.shape[0] / self.num_prototypes), x_norm.shape[0])
        values, idx = per_prototype.topk(k, dim=1)
        values = values / values.sum(dim=1, keepdim=True).clamp_min(torch.finfo(values.dtype).tiny)
        summary = (x_norm[idx] * values.unsqueeze(-1).to(x_norm.dtype)).sum(dim=1)   # (G, d)
        self.local_prototypes.mul_(self.gamma).add_((1 - self.gamma) * summary)


class AlignedMLP(nn.Module):
    """An MLP with an ALP layer on the output of one hidden layer (``after``, 0-based)."""

    def __init__(self, mlp: MLP, alp: ALPLayer, after: int) -> None:
        super().__init__()
        if not 0 <= after < len(mlp.layers) - 1:
            raise ValueError(f"the ALP layer must follow a hidden layer (0..{len(mlp.layers) - 2}), got {after}")
        self.body = mlp
        self.alp = alp
        self.after = after

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        last = len(self.body.layers) - 1
        for i, layer in enumerate(self.body.layers):
            h = layer(h)
            if i < last:
                h = torch.relu(h)
            if i == self.after:
                h = self.alp(h)
        return h


class AlignedModel(nn.Module):
    """A model of the user's own with an ALP layer between its ``features`` and its ``head``
    (what ``AlignedMLP`` does for the MLP's last hidden layer)."""

    def __init__(self, model: nn.Module, alp: ALPLayer) -> None:
        super().__init__()
        self.body = model
        self.alp = alp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        body: Any = self.body   # a model of the user's own, with ``features`` and a ``head``
        return cast(torch.Tensor, body.head(self.alp(body.features(x))))


def kmeans_prototypes(local_sets: list[torch.Tensor], weights: list[float],
                      count_work: Callable[[float], None] | None = None) -> torch.Tensor:
    """FedAli Sec. 4 / Alg. 1 line 11: the new global prototypes are the centroids of k-means
    (G clusters, G = prototypes per device) over every member's local prototypes, started from
    the members' sample-weighted average of their local prototypes (the paper's P_centroid^init,
    for stability across rounds). One deterministic Lloyd run from that start (scikit-learn).
    ``count_work`` is told its distance computations' FLOPs (every iteration it ran, and the
    final assignment)."""
    import warnings

    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    stacked = torch.stack([p.to(torch.float64) for p in local_sets])                 # (M, G, d)
    w = torch.as_tensor(weights, dtype=torch.float64)
    w = w / w.sum() if float(w.sum()) > 0 else torch.full_like(w, 1.0 / len(weights))
    init = torch.tensordot(w, stacked, dims=1).numpy()                               # (G, d)
    points = stacked.reshape(-1, stacked.shape[-1]).numpy()
    with warnings.catch_warnings():
        # Identical members (e.g. right after a reset) give fewer distinct points than clusters:
        # the duplicate centroids are kept, which is what the next round should start from.
        warnings.simplefilter("ignore", ConvergenceWarning)
        km = KMeans(n_clusters=init.shape[0], init=init, n_init=1).fit(points)
    if count_work is not None:
        count_work(2.0 * points.shape[0] * init.shape[0] * points.shape[1] * (int(km.n_iter_) + 1))
    return torch.as_tensor(km.cluster_centers_, dtype=local_sets[0].dtype)


def prototype_digest(prototypes: torch.Tensor) -> bytes:
    """One member's local prototypes as part of ``PrototypeClusterings``' key: a digest of their
    dtype, shape and bytes."""
    array = np.ascontiguousarray(prototypes.detach().numpy())
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"{array.dtype.str}{array.shape}".encode())
    digest.update(array.tobytes())
    return digest.digest()


class PrototypeClusterings:
    """``kmeans_prototypes``' results, keyed on their exact inputs (each member's local prototypes,
    in the order given, and the weights): on a dense graph every device clusters the same sets,
    so the devices a process simulates (``ctx.shared``) compute each once. Each caller is still
    told the work as if it had computed it (every real device does). A bounded LRU."""

    def __init__(self, maxsize: int = 256) -> None:
        self.maxsize = maxsize
        self.hits = 0
        self._store: OrderedDict[bytes, tuple[torch.Tensor, float]] = OrderedDict()

    @staticmethod
    def _key(digests: list[bytes], weights: list[float]) -> bytes:
        digest = hashlib.blake2b(digest_size=20)
        digest.update(np.asarray(weights, dtype=np.float64).tobytes())
        digest.update(b"".join(digests))
        return digest.digest()

    def centroids(self, local_sets: list[torch.Tensor], weights: list[float],
                  count_work: Callable[[float], None] | None = None,
                  digests: list[bytes | None] | None = None) -> torch.Tensor:
        """``kmeans_prototypes(local_sets, weights, count_work)``, computed once per content.
        ``digests``: each set's ``prototype_digest`` where already known (None: computed here)."""
        known = digests or [None] * len(local_sets)
        key = self._key([prototype_digest(p) if d is None else d for p, d in zip(local_sets, known, strict=True)],
                        weights)
        found = self._store.get(key)
        if found is None:
            told: list[float] = []
            found = (kmeans_prototypes(local_sets, weights, count_work=told.append), sum(told))
            self._store[key] = found
            if len(self._store) > self.maxsize:
                self._store.popitem(last=False)
        else:
            self.hits += 1
            self._store.move_to_end(key)
        if count_work is not None:
            count_work(found[1])
        return found[0].clone()
