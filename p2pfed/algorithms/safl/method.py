"""``safl``: SAFL without a server — clustered, guided Network-Slimming pruning, then Hermes.

Follows Nan Li, Xiaolu Wang, Xiao Du, Puyu Cai, Ting Wang, *Personalized Federated Learning
via Client-Specific Clustering and SCSI-Guided Model Pruning* (SAFL), Sec. III, Alg. 1-2. It works on the
units of a model's layers (``learning/units.py``: ``model.name: mlp`` or ``cnn``; any other model
is refused in one line), each hidden unit with a scaling factor (``slimming.py``):

* on a CNN, as the paper does, the units are the channels of the conv blocks and the factors the
  batch-norm weights Θ^BN of their channels (no extra parameters). The guided L1 terms (Sec.
  III-B3) act on those BN scales; NetSlim (Sec. III-B4, *Model Pruning*: "client ranks the
  weights in the Θ_i^BN,t. The threshold is set at the r_t-th smallest weight") prunes the
  channels with the smallest |γ|, ranked over all blocks, by zeroing their BN scale and shift;
  ModelRecover (Sec. III-B2) restores the full model with those BN weights at zero (the shift
  as it was). The sub-model that travels drops a pruned channel's filter, bias, BN scale and
  shift and the next convolution's input channel (the head's input column for the last block);
  the fusions average each element over the sub-models that hold it. The BN layers (scales,
  shifts, running statistics) stay each device's own in stage two, as Sec. IV-C keeps them (FedBN);
* on the MLP (no batch norm) one learnable gate per hidden unit (``MLP.add_unit_gates``) multiplies
  its ReLU output and plays the part of Θ^BN.

Stage one, clustered model pruning (Alg. 1), rounds 0..T-1 with pruning rates r_0..r_{T-1}
(``target_rate`` in steps of ``rate_step``, Sec. IV-C), each round on every device:
  l.4-5  choose a cluster ĵ: the candidate cluster model with the lowest loss on the device's
         own training data (IFCA, Sec. III-B1);
  l.6    model recovery (Sec. III-B2): pruned units are trainable again, back with factor 0;
  l.7    guided update (Sec. III-B3): train with CE + λ Σ_b ||Θ^BN_b||_1 + μ Σ_b ||Θ^BN_b - Θ^clusterBN_ĵ,b||_1;
  l.8    NetSlim (Sec. III-B4): prune the units (a CNN's channels) with the smallest |factor| to rate r_t;
  l.9    fine-tune the pruned model for τ epochs;
  l.10   send the pruned sub-model, tagged with ĵ.
Stage two (Alg. 2, Hermes's personalization-preserving aggregation, Sec. III-C): the structure
is fixed; each round the device trains its sub-model and averages every parameter it holds with
the neighbours that hold it too; parameters only it holds stay its own.

Serverless adaptations. The server's part runs on each device over its neighbourhood: the
candidate cluster models are the heterogeneous fusions (Fig. 3, overlap frequency) of the
sub-models its neighbours last sent, grouped by the cluster they chose — so a device's
candidates are the clusters present around it, and its own model is not among them (no bias
toward the cluster it is already in). In round 0 (nothing received yet) the candidates are K
initial cluster models that every device derives alike from the shared initial weights, as a
server's first broadcast of θ^cluster,0 would give them. The factors stay local in stage two
(the paper's implementation keeps BN layers local, FedBN-style, Sec. IV-C: on a CNN the BN
scales and shifts, on the MLP the gates); they travel only as
the cluster's guidance in stage one. Stage two averages with every neighbour, as Hermes's server
does with every client.
"""

from __future__ import annotations

import copy
import math
import zlib
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, ValidationInfo, model_validator
from torch import nn
from torch.func import functional_call

from p2pfed.algorithms.base import (Algorithm, ArtifactError, DeviceContext, FusionWork, Payload, Received,
                                    TrainingWork, UnitOptions, require_units, run_facts)
from p2pfed.algorithms.registry import register
from p2pfed.algorithms.model_payload import sample_count
from p2pfed.algorithms.state import array_from_state, array_state
from p2pfed.algorithms.safl.wire import decode_submodel, encode_submodel
from p2pfed.algorithms.robust import RobustOptions
from p2pfed.algorithms.safl.heterogeneous import RobustRule, SubModel, fuse_cluster, preserve_personal
from p2pfed.energy.work import forward_macs
from p2pfed.learning.model import MLP, seed_cpu_generator
from p2pfed.algorithms.safl.slimming import (factor_names, full_masks, gate_values, guided_sparsity_loss,
                                             kept_parameter_fraction, local_names, pruned_fraction,
                                             sub_model_gradient_masks, recover_units, slim_masks, zero_pruned_factors)
from p2pfed.learning.training import train_epochs


class SaflOptions(UnitOptions, RobustOptions):
    clusters: int = Field(2, ge=1, le=64, description="K, the number of cluster identities (Alg. 1 input K).")
    target_rate: float = Field(0.3, ge=0, lt=1, description=(
        "The pruning rate reached at the end of stage one: the fraction of hidden units pruned."))
    rate_step: float = Field(0.1, gt=0, le=1, description=(
        "The pruning rate rises by this per step, from 0 to `target_rate`."))
    rounds_per_rate: int = Field(1, ge=1, description=(
        "Rounds spent at each rate; stage one lasts (steps + 1) times this, which must fit in `rounds`."))
    lam: float = Field(1e-4, ge=0, description=(
        "Lambda, the weight of the L1 sparsity of the scaling factors in the guided loss (Sec. III-B3)."))
    mu: float = Field(0.004, ge=0, description=(
        "Mu, the weight of the L1 pull of the scaling factors toward the chosen cluster's (Sec. III-B3); 0 turns the "
        "guidance off."))
    fine_tune_epochs: int = Field(1, ge=0, description=(
        "Tau, epochs of fine-tuning the pruned model after each pruning (Alg. 1 l.9)."))

    @model_validator(mode="after")
    def _model_has_batch_norm(self, info: ValidationInfo) -> SaflOptions:
        facts = run_facts(info)
        if facts is not None and not facts.batch_norm:
            raise ValueError("model.options.batch_norm: SAFL prunes a CNN's channels by their batch-norm scales "
                             "(Network Slimming); this CNN has no batch norm: leave batch_norm at true")
        return self

    @model_validator(mode="after")
    def _stage_one_fits(self, info: ValidationInfo) -> SaflOptions:
        facts = run_facts(info)
        schedule = rate_schedule(self.target_rate, self.rate_step)
        needed = len(schedule) * self.rounds_per_rate
        if facts is not None and needed > facts.rounds:
            raise ValueError(f"algorithm.target_rate: stage one needs {needed} rounds (rates {schedule}, "
                             f"{self.rounds_per_rate} round(s) each) but the run has {facts.rounds}; lower "
                             f"target_rate or rounds_per_rate, raise rate_step or rounds")
        return self


def fresh_model(model: nn.Module, seed: int) -> nn.Module:
    """A freshly initialised copy of ``model``'s architecture whose weights depend only on
    ``seed``: every layer's ``reset_parameters`` in module order (as the constructor draws them),
    scaling factors at 1 (the MLP's gates; batch norm's scales start at 1)."""
    fresh = copy.deepcopy(model)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        seed_cpu_generator(seed)
        for module in fresh.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
        if isinstance(fresh, MLP) and fresh.gates is not None:
            for g in fresh.gates:
                g.fill_(1.0)
    return fresh


def rate_schedule(target: float, step: float) -> list[float]:
    """r_0..r_{T-1}: 0, step, 2 step, ... up to ``target`` (Sec. IV-C: 0.5 by 0.1 is
    [0, 0.1, 0.2, 0.3, 0.4, 0.5])."""
    steps = math.ceil(target / step - 1e-9)
    return [round(min(k * step, target), 10) for k in range(steps + 1)]


@register
class Safl(Algorithm[SaflOptions]):
    name = "safl"
    message_kind = "safl/submodel"

    def __init__(self, ctx: DeviceContext, options: SaflOptions) -> None:
        super().__init__(ctx, options)
        model = self.model = require_units(ctx, self.name)   # ctx.model: the MLP or the CNN
        # The initial weights are the same on every device: they seed the K initial cluster models.
        self._init_seed = zlib.crc32(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
        if isinstance(model, MLP):
            model.add_unit_gates()   # the MLP has no batch norm: one factor per unit (slimming.py)
        self.schedule = rate_schedule(options.target_rate, options.rate_step)
        self.stage_one_rounds = len(self.schedule) * options.rounds_per_rate
        self.masks = full_masks(model)
        self.shifts: dict[str, np.ndarray] = {}   # a CNN's BN shifts of pruned channels, for ModelRecover
        self.cluster: int | None = None
        self.switches = 0             # times the device changed cluster after its first choice
        self.last_candidates = 0      # cluster models it chose among, last time
        self.overlap_shared = 0.0     # stage two: share of its parameters some neighbour also held
        self.robust_counts = [0, 0, 0]  # robust stage-two fusions, peer candidates offered, set aside
        self.last_round = -1          # the last round the device trained in
        self._initial: dict[int, SubModel] | None = None

    # -- schedule ----------------------------------------------------------------------------
    def rate(self, round: int) -> float:
        return self.schedule[min(round // self.options.rounds_per_rate, len(self.schedule) - 1)]

    def stage_one(self, round: int) -> bool:
        return round < self.stage_one_rounds

    # -- stage one: cluster choice (Alg. 1 l.4-5) --------------------------------------------
    def initial_clusters(self) -> dict[int, SubModel]:
        """θ^cluster,0 for j in [K]: freshly initialised full models, alike on every device."""
        if self._initial is None:
            self._initial = {}
            for j in range(self.options.clusters):
                init = fresh_model(self.model, (self._init_seed + 7919 * (j + 1)) % 2**32)
                self._initial[j] = SubModel(full_masks(init),
                                            {n: p.detach().clone() for n, p in init.named_parameters()})
        return self._initial

    def peer_submodels(self) -> list[tuple[int, SubModel, float]]:
        """(cluster, sub-model, pruning rate) of every neighbour's newest share, in peer order."""
        cache = cast("dict[int, Received]", self.cache)   # keyed by peer id: shares come whole
        return [(int(cache[k].payload.meta["cluster"]), cache[k].parsed,
                 float(cache[k].payload.meta["rate"])) for k in sorted(cache)]

    def cluster_candidates(self) -> dict[int, SubModel]:
        """Per cluster present among the neighbours, the fusion of its members' sub-models (Fig. 3)
        at their mean pruning rate."""
        by_cluster: dict[int, list[tuple[SubModel, float]]] = {}
        for cluster, sub, rate in self.peer_submodels():
            by_cluster.setdefault(cluster, []).append((sub, rate))
        return {j: fuse_cluster(self.model, [s for s, _ in members], float(np.mean([r for _, r in members])))
                for j, members in sorted(by_cluster.items())}

    @torch.no_grad()
    def own_loss(self, sub: SubModel) -> float:
        """ℓ_i: mean cross-entropy of a cluster model on this device's training data."""
        model = self.model
        model.eval()
        logits = functional_call(model, sub.values, (self.ctx.x_train,))
        return float(F.cross_entropy(logits, self.ctx.y_train))

    def choose_cluster(self) -> SubModel | None:
        """IFCA: the candidate with the lowest loss on own data becomes ĵ; returns its model
        (None: no candidate, the device keeps its cluster and trains unguided)."""
        candidates = self.cluster_candidates()
        if not candidates and self.cluster is None:
            candidates = self.initial_clusters()
        self.last_candidates = len(candidates)
        # its work: each peer's sub-model summed into its cluster's model, each candidate scored
        # by a forward pass over this device's data
        size = sum(p.numel() for p in self.model.parameters())
        scoring = 2.0 * forward_macs(self.model, int(self.ctx.x_train.shape[1])) * self.ctx.num_samples
        self.ctx.count_work(2.0 * size * len(self.cache) + scoring * len(candidates))
        if not candidates or self.ctx.num_samples == 0:
            return None
        choice = min(candidates, key=lambda j: (self.own_loss(candidates[j]), j))
        if self.cluster is not None and choice != self.cluster:
            self.switches += 1
        self.cluster = choice
        return candidates[choice]

    # -- Algorithm ---------------------------------------------------------------------------
    def train(self, round: int) -> TrainingWork:
        """Stage two: the fixed sub-model's training, for the runtime (its pruned units frozen by
        gradient masks). Stage one trains here: the guided update, then NetSlim and FineTune,
        which depend on it."""
        ctx, o = self.ctx, self.options
        model = self.model
        self.last_round = round
        if not self.stage_one(round):            # Alg. 2 l.4: local training of the fixed sub-model
            return self.training_job(gradient_masks=sub_model_gradient_masks(model, self.masks))
        guide = self.choose_cluster()
        guide_gates = None if guide is None else [guide.values[n] for n in factor_names(model)]
        # ModelRecover + GuidedUpdate: every unit trains, pruned ones starting from factor 0.
        recover_units(model, self.masks, self.shifts)
        train_epochs(model, ctx.x_train, ctx.y_train, ctx.training, ctx.torch_generator,
                     extra_loss=guided_sparsity_loss(o.lam, o.mu, guide_gates))
        # NetSlim to r_t, then FineTune for τ epochs on the pruned model.
        self.masks = slim_masks(gate_values(model), self.rate(round))
        self.shifts = zero_pruned_factors(model, self.masks)
        if o.fine_tune_epochs:
            train_epochs(model, ctx.x_train, ctx.y_train, ctx.training, ctx.torch_generator,
                         epochs=o.fine_tune_epochs, gradient_masks=sub_model_gradient_masks(model, self.masks))
        return None

    def share(self, round: int) -> Payload | None:
        return encode_submodel(self.model, self.masks, num_samples=self.ctx.num_samples,
                               cluster=0 if self.cluster is None else self.cluster,
                               rate=pruned_fraction(self.masks), stage=1 if self.stage_one(round) else 2)

    def parse(self, payload: Payload) -> SubModel:
        """A neighbour's share, checked (meta and shapes) and decoded."""
        sample_count(payload)
        k = self.options.clusters
        cluster, rate, stage = (payload.meta.get(f) for f in ("cluster", "rate", "stage"))
        if not isinstance(cluster, int) or isinstance(cluster, bool) or not 0 <= cluster < k:
            raise ArtifactError(f"meta 'cluster' must be an int in 0..{k - 1}, got {cluster!r}")
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 <= rate < 1:
            raise ArtifactError(f"meta 'rate' must be a number in [0, 1), got {rate!r}")
        if stage not in (1, 2) or isinstance(stage, bool):
            raise ArtifactError(f"meta 'stage' must be 1 or 2, got {stage!r}")
        return decode_submodel(self.model, payload)

    def check(self, payload: Payload) -> SubModel:
        return self.parse(payload)

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        """Stage one: nothing to average (the cluster models are formed when the device trains,
        from its cache). Stage two: Hermes aggregation with what arrived since the last fusion,
        done here (each parameter averaged over the members holding it)."""
        if self.stage_one(round):
            return None
        model = self.model
        local = set(local_names(model))   # the factors (gates; a CNN's BN scales and shifts) stay local
        names = [n for n, _ in model.named_parameters() if n not in local]
        peers = [(r.parsed, float(sample_count(r.payload))) for r in fresh]
        o = self.options
        robust = None if o.robust == "none" else RobustRule(o.robust, o.trim_fraction, o.byzantine, o.krum_select,
                                                            o.clip_norm)
        self.overlap_shared = preserve_personal(model, self.masks, float(self.ctx.num_samples), peers, names, robust)
        shared_size = sum(p.numel() for n, p in model.named_parameters() if n in names)
        # its work: a multiply-add per value of each member
        self.ctx.count_work(2.0 * shared_size * (len(peers) + 1) if peers else 0.0)
        if robust is not None and peers:
            self.robust_counts[0] += 1
            self.robust_counts[1] += robust.offered
            self.robust_counts[2] += robust.set_aside
        return None

    def stats(self) -> dict[str, Any]:
        """Model size kept (parameters of the sub-model / full model), pruning rate reached (hidden
        units pruned: a CNN's channels), the share of devices in each cluster, cluster switches, candidates at the
        last choice, whether stage two runs, and (stage two) the share of the device's parameters
        that a neighbour also held at the last aggregation."""
        k = self.options.clusters
        return {"model_size_kept": kept_parameter_fraction(self.model, self.masks),
                "pruning_rate": pruned_fraction(self.masks),
                "target_rate": self.options.target_rate,
                "cluster_share": {str(j): float(self.cluster == j) for j in range(k)},
                "cluster_switches": self.switches,
                "cluster_candidates": self.last_candidates,
                "stage_two": float(self.last_round >= self.stage_one_rounds),
                "overlap_shared": self.overlap_shared, **self._robust_stats()}

    def _robust_stats(self) -> dict[str, Any]:
        """With ``robust``: stage-two fusions combined robustly, and the share of peer candidates
        (per group of elements with the same holders) that Krum did not select or clipping shortened."""
        if self.options.robust == "none":
            return {}
        fusions, offered, left_out = self.robust_counts
        return {"robust_fusions": fusions,
                "robust_peer_rows_set_aside_fraction": left_out / offered if offered else 0.0}

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "masks": [array_state(m) for m in self.masks],
                "cluster": -1 if self.cluster is None else self.cluster, "switches": self.switches,
                "last_candidates": self.last_candidates, "overlap_shared": self.overlap_shared,
                "last_round": self.last_round, "robust_counts": list(self.robust_counts),
                **({"shifts": {n: array_state(a) for n, a in self.shifts.items()}} if self.shifts else {})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.masks = [array_from_state(m) for m in state["masks"]]
        self.cluster = None if state["cluster"] < 0 else int(state["cluster"])
        self.switches = int(state["switches"])
        self.last_candidates = int(state["last_candidates"])
        self.overlap_shared = float(state["overlap_shared"])
        self.robust_counts = [int(v) for v in state.get("robust_counts", [0, 0, 0])]
        self.last_round = int(state["last_round"])
        self.shifts = {n: array_from_state(a) for n, a in state.get("shifts", {}).items()}
