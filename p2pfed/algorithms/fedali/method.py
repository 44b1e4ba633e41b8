"""``fedali``: Federated Alignment with an ALP layer, without a server.

Follows FedAli (Ek, Wang, Portet, Lalanda, Cao, "FedAli: Personalized Federated Learning with
Aligned Prototypes through Optimal Transport"; Sec. 3-4, Alg. 1, Appendix A). The device's MLP
gets an Alignment-with-Prototypes layer on a hidden layer's output (``p2pfed.algorithms.fedali.alignment``):
in training, embeddings are pulled toward their hard-assigned global prototype and the local
prototypes follow the embeddings (EMA); in inference, embeddings are pulled toward the local ones.

On ``model.name: cnn`` (and a model of the user's own with ``features`` and a Linear ``head``)
the ALP layer sits on the representation the head reads, as the paper places it on the
encoder's embeddings: the CNN's ``features(x)``, one value per channel of the last conv block
after global average pooling, so the head classifies the aligned, L2-normalised embedding
(``AlignedModel``: head(ALP(features(x)))). The prototypes live in that channel space (d = the
last block's channels). ``hidden_layer`` picks an MLP layer and is refused on another model.
The batch norms' running statistics are buffers each device keeps; the ALP layer makes the
aligned network train one device at a time (its prototypes change in the forward pass).

Serverless, the server's part of Alg. 1 runs on every device over its neighbourhood: a fusion
averages the weights (MLP and GLU) with the neighbours' by sample count, as ``gossip-avg`` does
(line 8), and the new global prototypes are k-means centroids (G clusters) over the local
prototypes of the device and of the neighbours that sent since the last fusion, started from their
sample-weighted average (lines 9-12). The local prototypes are reset to the global ones when the
next local training starts, which the paper found better than keeping them (Sec. 4, last paragraph:
"updating the local prototypes P_local at the start of each round"). Until then the device keeps
the personal prototypes its last training left, and an evaluation after the fusion scores them:
inference aligns to P_local (Eq. 3), and the authors' released code scores each client model
(Sec. 5.1, Personalization) right after its local training, personal prototypes included.
"""

from __future__ import annotations

import zlib
from typing import Any, cast

import numpy as np
import torch
from pydantic import Field, ValidationInfo, model_validator
from torch import nn

from p2pfed.algorithms.base import (Algorithm, DeviceContext, FusionWork, Options, Payload, Received, TrainingWork,
                                    expect_array, run_facts)
from p2pfed.algorithms.fedali.alignment import (ALPLayer, AlignedMLP, AlignedModel, PrototypeClusterings,
                                               prototype_digest)
from p2pfed.algorithms.model_payload import averaging_job, model_payload, model_tensors, sample_count
from p2pfed.algorithms.registry import register
from p2pfed.algorithms.state import model_state
from p2pfed.learning.model import MLP, feature_dim

PROTOTYPES = "local_prototypes"   # the payload tensor with the sender's local prototypes
PROTOTYPES_MEMO = ("fedali", "prototypes")   # a received message's prototypes and digest, in its memo


class FedAliOptions(Options):
    prototypes: int = Field(64, ge=1, description="G, the number of local and of global prototypes (Sec. 3.1).")
    beta: float = Field(0.2, ge=0, le=1, description=(
        "Beta of Eq. 7, the weight of the matched prototype in the layer's output, beta * GLU(matched) + (1 - beta) *"
        " x."))
    gamma: float = Field(0.999, ge=0, le=1, description=(
        "Gamma of Eq. 5, the EMA decay of the local prototypes, applied at every training batch (App. A)."))
    epsilon: float = Field(0.05, gt=0, description="Epsilon of Eq. 4, the Sinkhorn entropic regularisation.")
    sinkhorn_iterations: int = Field(3, ge=1, description="Sinkhorn-Knopp sweeps (rows, then columns) of Eq. 4.")
    reset_local: bool = Field(True, description=(
        "The local prototypes restart from the new global ones when the first training after a fusion starts (Sec. "
        "4); until then the model aligns to the personal prototypes its last training left. false: they are never "
        "reset."))
    hidden_layer: int | None = Field(None, ge=1, description=(
        "The hidden layer whose ReLU output is aligned, 1 = first (the MLP only); null: the last, the embedding the "
        "head reads."))

    @model_validator(mode="after")
    def _layer_exists(self, info: ValidationInfo) -> FedAliOptions:
        facts = run_facts(info)
        if facts is None or self.hidden_layer is None:
            return self
        if facts.mlp_layers is None:
            raise ValueError(f"algorithm.hidden_layer: picks a layer of the MLP; {facts.model_name!r} is "
                             "aligned on its features() (leave hidden_layer out)")
        if self.hidden_layer > facts.mlp_layers - 1:
            raise ValueError(f"algorithm.hidden_layer: {self.hidden_layer} is past the model's "
                             f"{facts.mlp_layers - 1} hidden layer(s)")
        return self


@register
class FedAli(Algorithm[FedAliOptions]):
    name = "fedali"
    message_kind = "fedali/model"
    reads_fresh_only = True   # fuses the weights and prototypes that arrived since its last fusion

    def __init__(self, ctx: DeviceContext, options: FedAliOptions) -> None:
        super().__init__(ctx, options)
        model = ctx.model
        if isinstance(model, MLP):
            after = len(model.layers) - 2 if options.hidden_layer is None else options.hidden_layer - 1
            if not 0 <= after < len(model.layers) - 1:
                raise ValueError(f"algorithm.hidden_layer: {options.hidden_layer} is past the model's "
                                 f"{len(model.layers) - 1} hidden layer(s)")
            dim = model.layers[after].out_features
        else:
            dim = feature_dim(model, ctx.model_name)   # aligned on features(x), before the head
        seed = int(np.random.SeedSequence(ctx.model_seed, spawn_key=(zlib.crc32(b"fedali-alp"),))
                   .generate_state(1)[0])
        alp = ALPLayer(dim, options.prototypes, beta=options.beta, gamma=options.gamma,
                       epsilon=options.epsilon, iterations=options.sinkhorn_iterations,
                       generator=torch.Generator().manual_seed(seed))
        # ctx.model's parameters live inside it
        self.net: nn.Module = AlignedMLP(model, alp, after) if isinstance(model, MLP) else AlignedModel(model, alp)
        self.weights = [name for name, _ in self.net.named_parameters()]
        self.numbers: dict[str, float] = {}            # the latest round's mechanism statistics
        self.reset_due = False   # a fusion brought global prototypes the next training starts from
        # One memo of the global prototypes' k-means for every device in the process (content-keyed).
        self.clusterings: PrototypeClusterings = ctx.shared.setdefault("fedali/clustering", PrototypeClusterings())

    @property
    def alp(self) -> ALPLayer:
        return cast(ALPLayer, self.net.alp)

    # -- Algorithm -----------------------------------------------------------------------------
    def train(self, round: int) -> TrainingWork:
        """The aligned network's training (its ALP layer keeps state: it runs alone), then the
        mechanism's numbers. With ``reset_local`` the local prototypes first restart from the
        global ones of the latest fusion (Sec. 4: "at the start of each round")."""
        if self.reset_due:
            with torch.no_grad():
                self.alp.local_prototypes.copy_(self.alp.global_prototypes)
            self.reset_due = False
        before = self.alp.local_prototypes.clone()
        self.alp.reset_usage()

        def measure() -> None:
            self.numbers.update({
                "local_prototype_movement": _mean_row_distance(before, self.alp.local_prototypes),
                "plan_marginal_error": self.alp.last_marginal_error,
                "global_prototypes_assigned": float(len(self.alp.last_global_used)),
            })
        return self.training_job(model=self.net, then=measure)

    def share(self, round: int) -> Payload:
        payload = model_payload(self.net, self.ctx.num_samples, self.weights)
        payload.tensors[PROTOTYPES] = self.alp.local_prototypes.numpy().astype(np.float32, copy=True)
        return payload

    def check(self, payload: Payload) -> dict[str, np.ndarray]:
        tensors = model_tensors(self.net, payload, self.weights)
        sample_count(payload)
        expect_array(payload, PROTOTYPES, tuple(self.alp.local_prototypes.shape),
                     check=lambda a: bool(np.isfinite(a).all()))
        return tensors

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        """The global prototypes now (k-means over the neighbourhood's local ones); the weights'
        average as the job (batched with other devices' in synchronous rounds). The local
        prototypes stay as the last training left them (the evaluated model's, Eq. 3) and are
        reset when the next training starts (``train``)."""
        own = float(self.ctx.num_samples)
        counts = [float(sample_count(r.payload)) for r in fresh]
        job = averaging_job(self.net, own, [(r.parsed, n) for r, n in zip(fresh, counts)], self.weights)
        # A second fusion before the device trained again clusters the prototypes it will train
        # from: after a reset that is due, the global ones.
        mine = self.alp.global_prototypes if self.reset_due else self.alp.local_prototypes
        # The members in device order, so that neighbours holding one set cluster it alike.
        members: list[tuple[tuple[int, int, float], tuple[torch.Tensor, bytes | None], float]] = [
            ((self.ctx.device.device_id, -1, 0.0), (mine, None), own)]
        members += [((r.sender, r.round, r.sent_at), _prototypes(r), n) for r, n in zip(fresh, counts)]
        members.sort(key=lambda m: m[0])
        new_global = self.clusterings.centroids([prototypes for _, (prototypes, _), _ in members],
                                                [weight for _, _, weight in members],
                                                count_work=self.ctx.count_work,
                                                digests=[digest for _, (_, digest), _ in members])
        with torch.no_grad():
            shift = _mean_row_distance(self.alp.global_prototypes, new_global)
            self.alp.global_prototypes.copy_(new_global)
        self.reset_due = self.options.reset_local
        self.numbers.update({"global_prototype_shift": shift,
                             "global_prototypes_distinct": float(torch.unique(new_global, dim=0).shape[0]),
                             "kmeans_points": float(len(members) * self.alp.num_prototypes),
                             "kmeans_fusions": self.numbers.get("kmeans_fusions", 0.0) + 1})
        return job

    def evaluated_model(self) -> nn.Module:
        """The aligned network; in eval mode its ALP layer aligns to the local (personal)
        prototypes only (Eq. 3), which a fusion leaves as the device's last training left them."""
        return self.net

    def stats(self) -> dict[str, Any]:
        return dict(sorted(self.numbers.items()))

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "alp": model_state(self.alp),
                "numbers": {k: float(v) for k, v in self.numbers.items()}, "reset_due": self.reset_due}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.alp.load_state_dict(state["alp"])
        self.numbers = {k: float(v) for k, v in state["numbers"].items()}
        self.reset_due = bool(state["reset_due"])


def _prototypes(received: Received) -> tuple[torch.Tensor, bytes | None]:
    """A member's local prototypes and their digest (``prototype_digest``), made once per message:
    every receiver of a broadcast shares them (``Payload.memo``), read only."""
    def build() -> tuple[torch.Tensor, bytes | None]:
        prototypes = torch.from_numpy(np.array(received.payload.tensors[PROTOTYPES], dtype=np.float32))
        return prototypes, prototype_digest(prototypes)
    return received.payload.remember(PROTOTYPES_MEMO, build)


def _mean_row_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean L2 distance between matching rows (how far prototypes moved)."""
    return float((a.to(torch.float64) - b.to(torch.float64)).norm(dim=1).mean())
