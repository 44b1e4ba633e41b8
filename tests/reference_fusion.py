"""Fusion of class subnetworks from cluster-mates (FedSub Sec. 3.2, Eq. 6-10).

All functions work on parameter dictionaries ``name -> tensor`` with matching boolean masks,
so they do not care which extraction rule produced the masks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Params = dict[str, torch.Tensor]
Masks = dict[str, torch.Tensor]


def _normalised(scores: Sequence[float]) -> torch.Tensor:
    """Scores divided by the cluster maximum, as in the paper (all-zero → equal weights)."""
    s = torch.as_tensor([float(v) for v in scores], dtype=torch.float64)
    if s.numel() == 0:
        raise ValueError("a cluster needs at least one member")
    if bool((s < 0).any()) or not bool(torch.isfinite(s).all()):
        raise ValueError(f"reliability scores must be finite and >= 0, got {list(scores)}")
    top = s.max()
    return torch.ones_like(s) if float(top) == 0.0 else s / top


def overlapping_components(values: Sequence[Params], masks: Sequence[Masks],
                           scores: Sequence[float]) -> tuple[Params, Masks]:
    """Eq. 9: average the members' parameters, weighted by score, only where *every* member's
    subnetwork holds the parameter; the result is zero (and unmasked) elsewhere."""
    w = _normalised(scores)
    fused: Params = {}
    overlap: Masks = {}
    for name in masks[0]:
        common = torch.stack([m[name] for m in masks]).all(dim=0)
        stacked = torch.stack([v[name].to(torch.float64) for v in values])
        avg = torch.tensordot(w, stacked, dims=1) / w.sum()
        fused[name] = torch.where(common, avg, torch.zeros_like(avg)).to(values[0][name].dtype)
        overlap[name] = common
    return fused, overlap


def cluster_average(values: Sequence[Params], masks: Sequence[Masks],
                    scores: Sequence[float]) -> tuple[Params, Masks]:
    """Eq. 6: score-weighted average of the members' subnetworks. A parameter is averaged over
    the members whose subnetwork holds it (a zeroed-out parameter is absent, not a zero vote)."""
    w = _normalised(scores)
    fused: Params = {}
    covered: Masks = {}
    for name in masks[0]:
        m = torch.stack([mk[name] for mk in masks]).to(torch.float64)
        v = torch.stack([vk[name].to(torch.float64) for vk in values])
        wm = w.view(-1, *([1] * (m.dim() - 1))) * m
        total = wm.sum(dim=0)
        any_member = total > 0
        avg = (wm * v).sum(dim=0) / torch.where(any_member, total, torch.ones_like(total))
        fused[name] = avg.to(values[0][name].dtype)
        covered[name] = any_member
    return fused, covered


def cluster_leadership(values: Sequence[Params], masks: Sequence[Masks],
                       scores: Sequence[float]) -> tuple[Params, Masks]:
    """Eq. 8: the member with the highest score (first on ties) speaks for the cluster."""
    leader = int(torch.argmax(_normalised(scores)))
    return ({k: t.clone() for k, t in values[leader].items()},
            {k: t.clone() for k, t in masks[leader].items()})


def combine_cluster_updates(own: Params, updates: Sequence[tuple[Params, Masks]]) -> tuple[Params, Masks]:
    """Eq. 7/10: each parameter becomes the element-wise mean of the cluster updates that hold it;
    parameters no cluster holds keep the device's own value. Returns (new params, changed mask)."""
    new: Params = {}
    changed: Masks = {}
    for name, own_t in own.items():
        total = torch.zeros_like(own_t, dtype=torch.float64)
        count = torch.zeros_like(own_t, dtype=torch.float64)
        for fused, mask in updates:
            m = mask[name]
            total += torch.where(m, fused[name].to(torch.float64), torch.zeros_like(total))
            count += m.to(torch.float64)
        hit = count > 0
        new[name] = torch.where(hit, total / torch.where(hit, count, torch.ones_like(count)),
                                own_t.to(torch.float64)).to(own_t.dtype)
        changed[name] = hit
    return new, changed


FUSIONS = {
    "overlap": overlapping_components,
    "cluster-avg": cluster_average,
    "leadership": cluster_leadership,
}
