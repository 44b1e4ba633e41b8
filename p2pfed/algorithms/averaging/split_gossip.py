"""Gossip averaging of one part of the model while the rest never leaves the device.

FedPer keeps its head local; LG-FedAvg keeps its lower layers (the local representation), FedBN
its batch-norm layers. ``SplitGossip`` is what the last two share: a subclass names the two parts
(``split``), only the shared part is sent and averaged, and ``algorithm_stats`` counts the fusions
that changed each part: the kept part's count stays 0, the mechanism seen acting in a run.
"""

from __future__ import annotations

from typing import Any

import torch
from typing_extensions import TypeVar

from p2pfed.algorithms.base import DeviceContext, FusionWork, Received
from p2pfed.algorithms.averaging.gossip_avg import GossipAvg, GossipAvgOptions
from p2pfed.learning.batched_fusion import FusionJob
from p2pfed.learning.regularisers import snapshot

SplitOptionsT = TypeVar("SplitOptionsT", bound=GossipAvgOptions, default=GossipAvgOptions, covariant=True)


class SplitGossip(GossipAvg[SplitOptionsT]):
    """Averages ``split()``'s shared parameters with the neighbours; the kept ones stay local."""

    labels = ("shared", "kept")   # how algorithm_stats names the two parts

    def __init__(self, ctx: DeviceContext, options: SplitOptionsT) -> None:
        super().__init__(ctx, options)
        self.shared, self.kept = self.split()
        self.fusions_moved = dict.fromkeys(self.labels, 0)

    def split(self) -> tuple[list[str], list[str]]:
        """Parameter names sent and averaged, and those kept on the device."""
        raise NotImplementedError

    def shared_names(self) -> list[str]:
        return self.shared

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        return self.counted(super().fuse(fresh, round, now))

    def counted(self, job: FusionWork) -> FusionWork:
        """``job``, counting once its fused values are in which part they changed."""
        if isinstance(job, FusionJob):
            before = snapshot(self.ctx.model)
            job.then.append(lambda: self._count_moved(before))
        return job

    def _count_moved(self, before: dict[str, torch.Tensor]) -> None:
        moved = {n for n, p in self.ctx.model.named_parameters() if not torch.equal(p.detach(), before[n])}
        for label, names in zip(self.labels, (self.shared, self.kept), strict=True):
            self.fusions_moved[label] += bool(moved.intersection(names))

    def stats(self) -> dict[str, Any]:
        """Fusions that changed the shared part and the kept part (0: it never leaves the device),
        and the kept part's share of the model's parameters."""
        sizes = {n: p.numel() for n, p in self.ctx.model.named_parameters()}
        kept = sum(sizes[n] for n in self.kept) / max(1, sum(sizes.values()))
        return {**super().stats(), **{f"fusions_changing_{label}": self.fusions_moved[label] for label in self.labels},
                f"{self.labels[1]}_parameter_fraction": kept}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "fusions_moved": dict(self.fusions_moved)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.fusions_moved = {k: int(v) for k, v in state["fusions_moved"].items()}
