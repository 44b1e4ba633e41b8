"""``fedpews`` and ``fedpews-fixed``: a personalised warmup on neuron-level subnetworks, then
plain averaging — without a server.

Follows the FedPeWS poster (Tastan, Horváth, Takáč, Nandakumar: "FedPeWS: Personalized Warmup
via Subnetworks for Enhanced HETEROGENEOUS FEDERATED LEARNING"). *Phase 1. Warmup*: for the
first W rounds a device trains only its subnetwork, x_i^t = x_i^{t-1} − η_ℓ ∇f_i(x_i^{t-1} ⊙
m_i^{t-1}, ξ). The subnetwork comes from neuron-level scores s_i through G (σ, Bernoulli, parameter
masks; ``p2pfed.algorithms.fedpews.neuron_masks``). *Procedure I. Mask training*: s_i descends
L_s = f_i(x ⊙ G(s_i)) − λ‖σ(s_i) − θ_{g∖{i}}‖²; *Procedure II. Weight training*: x descends
L_x = f_i(x ⊙ G(s_i)). *Phase 2. Standard FL*: full model updates after the warmup.
FedPeWS-Fixed ("eliminates mask learning by assigning predefined subnetworks") gives each group
of devices a fixed, nearly disjoint block of units instead.

The poster defines masks per neuron; the units are those of ``learning/units.py``, so one
mechanism serves both built-in models: on ``model.name: mlp`` a hidden layer's neurons, on
``model.name: cnn`` a conv block's output channels (a dropped channel's filter, bias and batch
norm's scale and shift are masked, and so are the next block's filter slices and the head's
columns that read it; the head's classes and the input channels are always kept). A CNN's batch
norm running statistics are buffers: each device keeps its own, in the warmup and after it.

Serverless adaptations (the poster has a server and gives no aggregation formula):
- θ_{g∖{i}}, the other clients' mask probabilities, is the mean of the σ(s) that the device's
  neighbours last sent (no term until one has arrived).
- Aggregation is gossip: each parameter becomes the sample-count-weighted mean over the device
  and its neighbours whose subnetwork holds it (a parameter outside a subnetwork was not trained
  there, so it is absent, not a zero vote); a parameter nobody holds keeps the device's value.
  After the warmup every share holds the whole model and this is ``gossip-avg``'s average.
- During the warmup a device sends only its subnetwork (the kept rows and columns of each
  layer, the kept filters and their kept input channels of each conv block), one bit per
  hidden unit, and (``fedpews``) σ(s_i); afterwards its whole model.
- One mask is drawn per round, from the device's own random stream, and used for all of the
  round's batches, so the parameters a device sends are exactly those it trained; each batch
  takes one step of Procedure I and one of II through the same backward pass.
- A device evaluates its current subnetwork during the warmup and the full model afterwards.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import torch
from pydantic import Field, ValidationInfo, model_validator
from torch import nn
from typing_extensions import TypeVar

from p2pfed.algorithms.base import (Algorithm, ArtifactError, DeviceContext, FusionWork, Payload, Received,
                                    TrainingWork, UnitOptions, expect_array, require_units, run_facts)
from p2pfed.algorithms.model_payload import model_payload, model_tensors, sample_count
from p2pfed.algorithms.registry import register
from p2pfed.algorithms.fedpews.neuron_masks import (ParamMasks, UnitMasks, average_where_held, fixed_units,
                                                    hidden_sizes, jaccard, layer_keeps, masked_copy,
                                                    parameter_masks, sample_units, train_subnetwork)
from p2pfed.learning.units import UnitLayer, unit_layers

PHASES = ("warmup", "full")


class WarmupOptions(UnitOptions):
    warmup_rounds: int | None = Field(None, ge=0, description=(
        "W, rounds of subnetwork training before full-model averaging (at most `rounds` - 1); null: a quarter of "
        "`rounds`."))

    @model_validator(mode="after")
    def _warmup_fits(self, info: ValidationInfo) -> WarmupOptions:
        facts = run_facts(info)
        if facts is None:
            return self
        if facts.mlp_layers is not None and facts.mlp_layers < 2:
            raise ValueError("model.hidden: FedPeWS masks hidden units; the model has none")
        if self.warmup_rounds is not None and self.warmup_rounds >= facts.rounds:
            raise ValueError(f"algorithm.warmup_rounds: {self.warmup_rounds} leaves no round of full-model "
                             f"averaging in a run of {facts.rounds} rounds; use at most {facts.rounds - 1}")
        return self


class FedPeWSFixedOptions(WarmupOptions):
    groups: int = Field(2, ge=1, description=(
        "Number of predefined subnetworks; device i gets subnetwork i mod `groups`, so order the devices so that "
        "those with alike data share a residue."))
    shared_fraction: float = Field(0.1, ge=0, lt=1, description=(
        "Fraction of each hidden layer (its first units) that every subnetwork keeps; the other units are split into "
        "`groups` contiguous, disjoint blocks."))


class FedPeWSOptions(WarmupOptions):
    lam: float = Field(0.01, description=(
        "Lambda of Procedure I, with the poster's sign: above 0 pushes the unit probabilities away from the "
        "neighbours' mean (toward unlike subnetworks), below 0 pulls them toward it, 0 drops the term."))
    score_lr: float = Field(100.0, gt=0, description=(
        "The learning rate of the neuron scores (plain gradient steps); the weights use `training.lr`."))
    init_prob: float = Field(0.5, gt=0, lt=1, description="The probability sigmoid(score) every unit starts from.")


# -- the subnetwork on the wire ------------------------------------------------------------------
def encode_subnetwork(model: nn.Module, units: UnitMasks) -> dict[str, np.ndarray]:
    """The parameters of the subnetwork only (of every unit layer's parameters, the kept rows
    and, in weights and filters, the kept columns or input channels) and one bit per hidden unit."""
    bits = torch.cat([u.bool() for u in units]).numpy()
    layers, keep = layer_keeps(model, [u.bool() for u in units], lambda n: torch.ones(n, dtype=torch.bool))
    params = dict(model.named_parameters())
    tensors = {"units": np.packbits(bits)}
    for i, layer in enumerate(layers):
        for name in layer.params:
            value = params[name].detach()[keep[i + 1]]
            if value.dim() > 1:
                value = value[:, keep[i]]
            tensors[name] = value.numpy().astype(np.float32)
    return tensors


def decode_subnetwork(model: nn.Module, payload: Payload) -> tuple[UnitMasks, dict[str, torch.Tensor]]:
    """Inverse of ``encode_subnetwork``, checked against the local model: the unit masks and the
    parameters as dense tensors (zero outside the subnetwork). Both go into ``payload.memo``: the
    receivers of a broadcast in the simulators share them (read-only), each checking the arrays'
    shapes against its own model first."""
    sizes = hidden_sizes(model)
    packed = expect_array(payload, "units", (-(-sum(sizes) // 8),), kinds="u")
    if packed.dtype != np.uint8:
        raise ArtifactError(f"tensor 'units' has dtype {packed.dtype}, expected uint8 (packed bits)")
    layers = unit_layers(model)
    key = ("fedpews/subnetwork", tuple(layers))
    units, keep = payload.remember(key + ("units",), lambda: _unpack_units(packed, model))
    shapes = {}
    for i, layer in enumerate(layers):
        rows, cols = int(keep[i + 1].sum()), int(keep[i].sum())
        for name, row_shape in zip(layer.params, layer.row_shapes):
            shapes[name] = (rows, cols, *row_shape[1:]) if row_shape else (rows,)
            expect_array(payload, name, shapes[name])
    return units, payload.remember(key, lambda: _dense_subnetwork(model, layers, payload, keep, shapes))


def _dense_subnetwork(model: nn.Module, layers: list[UnitLayer], payload: Payload, keep: list[torch.Tensor],
                      shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """Every unit layer's parameters as dense tensors, zero outside the kept rows and columns."""
    values = {}
    params = dict(model.named_parameters())
    for i, layer in enumerate(layers):
        rows = keep[i + 1].nonzero().squeeze(1)
        cols = keep[i].nonzero().squeeze(1)
        for name in layer.params:
            kept = expect_array(payload, name, shapes[name], check=lambda a: bool(np.isfinite(a).all()))
            dense = torch.zeros_like(params[name], dtype=torch.float32)
            index = (rows.unsqueeze(1), cols.unsqueeze(0)) if dense.dim() > 1 else (rows,)
            dense[index] = torch.from_numpy(np.array(kept, dtype=np.float32))
            values[name] = dense
    return values


def _unpack_units(packed: np.ndarray, model: nn.Module) -> tuple[UnitMasks, list[torch.Tensor]]:
    """The hidden units' masks, and every layer's kept inputs/outputs (inputs and classes all kept)."""
    sizes = hidden_sizes(model)
    bits = np.unpackbits(packed, count=sum(sizes)).astype(bool)
    units = [torch.from_numpy(part.copy()) for part in np.split(bits, np.cumsum(sizes)[:-1])]
    _, keep = layer_keeps(model, units, lambda n: torch.ones(n, dtype=torch.bool))
    return units, keep


class _Share:
    """A peer's share decoded: parameters, which of them it holds, its units and θ (if sent)."""

    def __init__(self, values: dict[str, torch.Tensor], masks: ParamMasks | None, units: UnitMasks | None,
                 theta: torch.Tensor | None, weight: float) -> None:
        self.values, self.masks, self.units, self.theta, self.weight = values, masks, units, theta, weight


WarmupOptionsT = TypeVar("WarmupOptionsT", bound=WarmupOptions, default=FedPeWSFixedOptions, covariant=True)


@register
class FedPeWSFixed(Algorithm[WarmupOptionsT]):
    """FedPeWS-Fixed: predefined subnetworks during the warmup (no mask learning)."""

    name = "fedpews-fixed"
    message_kind = "fedpews/subnetwork"

    def __init__(self, ctx: DeviceContext, options: WarmupOptionsT) -> None:
        super().__init__(ctx, options)
        self.model = require_units(ctx, self.name)
        self.warmup_rounds = ctx.rounds // 4 if options.warmup_rounds is None else options.warmup_rounds
        self.sizes = hidden_sizes(self.model)
        self.units: UnitMasks | None = None   # the neuron mask trained (and sent) in the last round
        self.phase = "warmup" if self.warmup_rounds > 0 else "full"
        self.warmup_rounds_done = 0
        self.phase_switches = 0
        self.last_overlap: float | None = None   # mean Jaccard with the neighbours at the last warmup fusion

    # -- the subnetwork of a round -------------------------------------------------------------
    def round_units(self) -> UnitMasks:
        """The predefined subnetwork of this device's group."""
        o = cast(FedPeWSFixedOptions, self.options)
        return fixed_units(self.sizes, o.groups, self.ctx.device_id % o.groups, o.shared_fraction)

    def train_warmup(self) -> None:
        assert self.units is not None
        train_subnetwork(self.model, self.units, self.ctx.x_train, self.ctx.y_train,
                         self.ctx.training, self.ctx.torch_generator)

    def warmup_tensors(self) -> dict[str, np.ndarray]:
        assert self.units is not None
        return encode_subnetwork(self.model, self.units)

    # -- Algorithm -------------------------------------------------------------------------------
    def _advance(self, round: int) -> None:
        if self.phase == "warmup" and round >= self.warmup_rounds:
            self.phase = "full"
            self.phase_switches += 1

    def train(self, round: int) -> TrainingWork:
        """Warmup: the round's subnetwork trains here (masked forward, scores learned alongside);
        afterwards plain training of the whole model, as a job."""
        self._advance(round)
        if self.phase == "warmup":
            self.units = self.round_units()
            self.train_warmup()
            self.warmup_rounds_done += 1
            return None
        self.units = None
        return self.training_job()

    def evaluated_model(self) -> nn.Module:
        """During warmup, the device's subnetwork alone (the rest masked out)."""
        model = self.model
        return model if self.units is None else masked_copy(model, parameter_masks(model, self.units))

    def share(self, round: int) -> Payload:
        if self.units is None:
            return model_payload(self.model, self.ctx.num_samples, phase="full")
        return Payload(meta={"num_samples": int(self.ctx.num_samples), "phase": "warmup"},
                       tensors=self.warmup_tensors())

    def decode(self, payload: Payload) -> _Share:
        weight = float(sample_count(payload))
        phase = payload.meta.get("phase")
        if phase not in PHASES:
            raise ArtifactError(f"meta 'phase' must be one of {', '.join(PHASES)}, got {phase!r}")
        model = self.model
        if phase == "full":
            tensors = model_tensors(model, payload)   # this receiver's check, then one copy per message
            key = ("fedpews/full", tuple((k, v.shape) for k, v in tensors.items()))
            values = payload.remember(key, lambda: {k: torch.from_numpy(np.array(v, dtype=np.float32))
                                                    for k, v in tensors.items()})
            return _Share(values, None, None, None, weight)   # holds every parameter
        units, values = decode_subnetwork(model, payload)
        theta = None
        if "theta" in payload.tensors:
            theta = torch.from_numpy(np.array(expect_array(
                payload, "theta", (sum(self.sizes),),
                check=lambda a: bool(np.isfinite(a).all() and (a >= 0).all() and (a <= 1).all())),
                dtype=np.float32))
        masks_key = ("fedpews/masks", tuple(tuple(p.shape) for p in model.parameters()))
        masks = payload.remember(masks_key, lambda: parameter_masks(model, units))
        return _Share(values, masks, units, theta, weight)

    def check(self, payload: Payload) -> _Share:
        return self.decode(payload)

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        """Each parameter: the weighted mean over this device and the fresh peers whose shares
        hold it (all of them after the warmup), done here; kept as it is where nobody holds it."""
        shares: list[_Share] = [r.parsed for r in fresh]
        model = self.model
        own_values = {n: p.detach().clone() for n, p in model.named_parameters()}
        own_masks = None if self.units is None else parameter_masks(model, self.units)
        average_where_held(model, [(own_values, own_masks, float(self.ctx.num_samples))]
                           + [(s.values, s.masks, s.weight) for s in shares])
        if self.units is not None:
            others = [s.units for s in shares if s.units is not None]
            if others:
                self.last_overlap = float(np.mean([jaccard(self.units, u) for u in others]))
        return None

    def stats(self) -> dict[str, Any]:
        """Warmup rounds trained, phase switches (1 once the device averages whole models), the
        fraction of hidden units in its last subnetwork and its overlap with the neighbours'."""
        out: dict[str, Any] = {"warmup_rounds_done": self.warmup_rounds_done,
                               "phase_switches": self.phase_switches}
        if self.warmup_rounds_done:
            units = self._last_warmup_units()
            out["mask_density"] = float(torch.cat(units).float().mean())
        if self.last_overlap is not None:
            out["mask_overlap"] = self.last_overlap
        return out

    def _last_warmup_units(self) -> UnitMasks:
        return self.units if self.units is not None else self.round_units()

    # -- state -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "phase": self.phase,
                "units": None if self.units is None else [u.clone() for u in self.units],
                "warmup_rounds_done": self.warmup_rounds_done, "phase_switches": self.phase_switches,
                "last_overlap": self.last_overlap}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)   # re-receives the cache, which decodes it again
        self.phase = str(state["phase"])
        self.units = None if state["units"] is None else [u.clone() for u in state["units"]]
        self.warmup_rounds_done = int(state["warmup_rounds_done"])
        self.phase_switches = int(state["phase_switches"])
        self.last_overlap = state["last_overlap"]


@register
class FedPeWS(FedPeWSFixed[FedPeWSOptions]):
    """FedPeWS: subnetworks learned from neuron scores, pushed away from the neighbours' masks."""

    name = "fedpews"
    message_kind = "fedpews/subnetwork"

    def __init__(self, ctx: DeviceContext, options: FedPeWSOptions) -> None:
        super().__init__(ctx, options)
        start = math.log(options.init_prob / (1 - options.init_prob))
        self.scores = [torch.full((n,), start, dtype=torch.float32) for n in self.sizes]
        self.last_units: UnitMasks | None = None   # the last warmup mask, for the statistics

    def round_units(self) -> UnitMasks:
        """m̃ ~ Bernoulli(σ(s)), drawn from the device's random stream (part of its state)."""
        return sample_units(self.scores, self.ctx.torch_generator)

    def neighbour_theta(self) -> torch.Tensor | None:
        """θ_{g∖{i}}: the mean of the mask probabilities the neighbours last sent."""
        cache = cast("dict[int, Received]", self.cache)   # keyed by peer id: shares come whole
        thetas = [cache[k].parsed.theta for k in sorted(cache) if cache[k].parsed.theta is not None]
        return torch.stack(thetas).mean(dim=0) if thetas else None

    def train_warmup(self) -> None:
        assert self.units is not None
        target = self.neighbour_theta()
        lam = self.options.lam
        penalty = None if target is None or lam == 0 else (
            lambda thetas: -lam * ((torch.cat(thetas) - target) ** 2).sum())
        train_subnetwork(self.model, self.units, self.ctx.x_train, self.ctx.y_train,
                         self.ctx.training, self.ctx.torch_generator, scores=self.scores,
                         score_lr=self.options.score_lr, score_penalty=penalty)
        self.last_units = [u.clone() for u in self.units]

    def warmup_tensors(self) -> dict[str, np.ndarray]:
        theta = torch.sigmoid(torch.cat(self.scores)).numpy().astype(np.float32)
        return {**super().warmup_tensors(), "theta": theta}

    def _last_warmup_units(self) -> UnitMasks:
        units = self.last_units if self.last_units is not None else self.units
        assert units is not None
        return units

    def stats(self) -> dict[str, Any]:
        """Besides FedPeWS-Fixed's: the mean mask probability σ(s) and how far the scores moved
        from their start (mean |s − s_0|), the sign that masks are being learned."""
        out = super().stats()
        s = torch.cat(self.scores)
        start = math.log(self.options.init_prob / (1 - self.options.init_prob))
        out["mask_probability"] = float(torch.sigmoid(s).mean())
        out["score_change"] = float((s - start).abs().mean())
        return out

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "scores": [s.clone() for s in self.scores],
                "last_units": None if self.last_units is None else [u.clone() for u in self.last_units]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.scores = [s.clone() for s in state["scores"]]
        self.last_units = None if state["last_units"] is None else [u.clone() for u in state["last_units"]]
