"""``fedclar``: gossip averaging, then averaging only within a cluster of similar neighbours.

Follows FedCLAR (Presotto et al., PerCom 2022) as the FedSub papers run it (journal Sec. 2
and 4.2 [9762352]): FedAvg until the shared model is stable (the papers: round 160 of 300),
then one hierarchical clustering of the clients by the cosine similarity of their model
updates with a distance threshold, a separate model per cluster from then on, and a final
local fine-tune. Serverless, at ``cluster_round`` every device also sends its update of that
round (weights after local training minus before). At its next fusion — the first one after
those updates can have arrived, in the loop's fuse → train → share order — each device clusters
itself and the neighbours whose updates it holds (average-linkage agglomerative clustering on
cosine distance, cut at ``threshold``) and from then on averages only with the neighbours in its
own cluster. In the last ``fine_tune_rounds`` rounds it trains alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from pydantic import Field, ValidationInfo, model_validator

from p2pfed.algorithms.base import DeviceContext, Payload, Received, TrainingWork, expect_array, run_facts
from p2pfed.algorithms.averaging.gossip_avg import GossipAvg, GossipAvgOptions
from p2pfed.algorithms.registry import register
from p2pfed.algorithms.state import array_from_state, array_state
from p2pfed.learning.model import num_parameters
from p2pfed.learning.regularisers import snapshot


class FedClarOptions(GossipAvgOptions):
    cluster_round: int | None = Field(None, ge=0, description=(
        "The round whose model updates (sent once, with the model) are clustered; a device clusters at its next "
        "fusion and from then on averages only with the neighbours in its cluster. At most `rounds - fine_tune_rounds"
        " - 2`; null: half of `rounds`."))
    threshold: float = Field(0.5, gt=0, le=2, description=(
        "The cosine distance at which average-linkage agglomerative clustering of the device's and its neighbours' "
        "updates stops merging. The FedSub journal's value is not known; set it per run."))
    fine_tune_rounds: int = Field(1, ge=0, description=(
        "The last rounds, in which a device neither sends nor averages and trains alone."))

    @model_validator(mode="after")
    def _room_to_cluster(self, info: ValidationInfo) -> FedClarOptions:
        facts = run_facts(info)
        if facts is None:
            return self
        cluster_round = facts.rounds // 2 if self.cluster_round is None else self.cluster_round
        last = facts.rounds - self.fine_tune_rounds - 2
        if cluster_round > last:
            raise ValueError(f"algorithm.cluster_round: {cluster_round} leaves no round to cluster in before the "
                             f"fine-tune (updates are shared at cluster_round and clustered at the next fusion); "
                             f"use at most {max(last, 0)} or more rounds")
        return self


def cosine_distances(vectors: np.ndarray) -> np.ndarray:
    """1 - cosine similarity between rows; a zero row is at distance 1 from everything else."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    dist: np.ndarray = np.clip(1.0 - unit @ unit.T, 0.0, 2.0)
    np.fill_diagonal(dist, 0.0)
    return dist


def cluster_of_first(updates: np.ndarray, threshold: float) -> np.ndarray:
    """Indices of the rows clustered with row 0 (average linkage, cosine distance < threshold)."""
    if len(updates) < 2:
        return np.zeros(len(updates), dtype=np.int64)
    from sklearn.cluster import AgglomerativeClustering   # imported when used: scikit-learn is slow to import

    labels = AgglomerativeClustering(n_clusters=None, metric="precomputed", linkage="average",
                                     distance_threshold=threshold).fit_predict(cosine_distances(updates))
    return np.flatnonzero(labels == labels[0])


@register
class FedClar(GossipAvg[FedClarOptions]):
    name = "fedclar"
    message_kind = "fedclar/model"

    def __init__(self, ctx: DeviceContext, options: FedClarOptions) -> None:
        super().__init__(ctx, options)
        self.cluster_round = ctx.rounds // 2 if options.cluster_round is None else options.cluster_round
        self.update: np.ndarray | None = None
        self.cluster: set[int] | None = None  # peers averaged with, once clustered
        self.candidates = 0                    # neighbours whose updates were clustered

    def local_phase(self, round: int) -> bool:
        return round >= self.ctx.rounds - self.options.fine_tune_rounds

    def train(self, round: int) -> TrainingWork:
        """Plain training; in ``cluster_round`` the update it makes is kept, to be shared."""
        if round != self.cluster_round:
            return self.training_job()
        before = snapshot(self.ctx.model)

        def keep_update() -> None:
            self.update = torch.cat([(p.detach() - before[n]).flatten()
                                     for n, p in self.ctx.model.named_parameters()]).numpy()
        return self.training_job(then=keep_update)

    def share(self, round: int) -> Payload | None:
        payload = super().share(round)
        if payload is not None and round == self.cluster_round and self.update is not None:
            payload.tensors["update"] = self.update.astype(np.float32)
        return payload

    def check(self, payload: Payload) -> Any:
        tensors = super().check(payload)
        if "update" in payload.tensors:
            expect_array(payload, "update", (num_parameters(self.ctx.model),),
                         check=lambda a: bool(np.isfinite(a).all()))
        return tensors

    def mates(self, round: int, fresh: list[Received]) -> list[Received]:
        if self.cluster is None and self.update is not None:
            self.cluster = self._form_cluster([r for r in fresh if "update" in r.payload.tensors])
        if self.cluster is None:
            return fresh
        return [r for r in fresh if r.sender in self.cluster]

    def _form_cluster(self, peers: list[Received]) -> set[int]:
        """The neighbours clustered with this device by their updates (once, for the rest of the run)."""
        assert self.update is not None
        updates = np.stack([self.update] + [np.asarray(r.payload.tensors["update"], dtype=np.float32)
                                            for r in peers])
        chosen = cluster_of_first(updates, self.options.threshold)
        self.ctx.count_work(2.0 * len(updates) ** 2 * updates.shape[1])   # its cosine distances
        self.candidates = len(peers)
        return {peers[i - 1].sender for i in chosen if i > 0}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "update": array_state(self.update),
                "cluster": None if self.cluster is None else sorted(self.cluster),
                "candidates": self.candidates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.update = array_from_state(state["update"])
        self.cluster = None if state["cluster"] is None else set(state["cluster"])
        self.candidates = state["candidates"]

    def stats(self) -> dict[str, Any]:
        """Whether the device formed its cluster, its members (itself included) and how many
        neighbours' updates it clustered."""
        if self.cluster is None:
            return {**super().stats(), "clustered": 0}
        return {**super().stats(), "clustered": 1, "cluster_members": len(self.cluster) + 1,
                "cluster_candidates": self.candidates + 1}
