"""``fedhome``: gossip averaging, then a local fine-tune of the head on SMOTE-balanced representations.

Follows FedHome (Wu et al., IEEE TMC 2022) as the FedSub papers run it (journal Sec. 2 and
4.2 [9296274]; ubiquitous Sec. 2 and 4.2), in the implementation they used — the one in
ProtoHAR's framework (``FLAlgorithms/users/userhome.py``, ``generate_data`` and ``train_pred``):
FedAvg trains a shared model; in the last ``fine_tune_rounds`` rounds (the papers: 50 of 300)
each client passes its local training data through the frozen representation network (every
layer but the last), balances those representations to equal class counts with SMOTE, and trains
only the classifier head on them. Serverless, FedAvg is ``gossip-avg``; in the final rounds a
device neither sends nor averages. With ``fine_tune_rounds`` at least the run's rounds it never
communicates.

``balance: input`` keeps the variant earlier versions used: SMOTE on the raw inputs and the
whole model fine-tuned. Either way the balanced set is drawn from the training data the device
holds now (``ctx.x_train``: in a dynamic run, its visible classes only) and drawn again when
those change. Unlike the reference, classes with at most ``smote_k`` samples are kept (SMOTE's
k is lowered for them, ``smote_balance``) instead of being left out of the fine-tune.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, cast

import torch
from pydantic import Field

from p2pfed.algorithms.base import BaseOptions, DeviceContext, TrainingWork
from p2pfed.algorithms.memory import DeviceFacts
from p2pfed.algorithms.averaging.balancing import SMOTE, smote_balance
from p2pfed.algorithms.averaging.fedper import split_body_head
from p2pfed.algorithms.averaging.gossip_avg import GossipAvg, GossipAvgOptions
from p2pfed.algorithms.registry import register
from p2pfed.algorithms.state import model_state
from p2pfed.extras import Requirement
from p2pfed.learning.model import feature_dim, head_of


class FedHomeOptions(GossipAvgOptions):
    fine_tune_rounds: int = Field(10, ge=0, description=(
        "The last rounds, in which a device neither sends nor averages and fine-tunes alone on its SMOTE-balanced set"
        " (see `balance`); at least `rounds` means it never communicates. The FedSub journal starts the fine-tune 50 "
        "rounds before the end of 300; the default is shorter so that short runs still communicate."))
    smote_k: int = Field(5, ge=1, description=(
        "SMOTE's nearest neighbours, lowered to a device's smallest class size - 1; classes a device lacks stay "
        "absent."))
    balance: Literal["representation", "input"] = Field("representation", description=(
        "`representation`: as the reference implementation, the training data pass through the frozen body, SMOTE "
        "balances those representations and only the head trains on them; `input`: SMOTE on the raw inputs, and the "
        "whole model fine-tuned."))


@register
class FedHome(GossipAvg[FedHomeOptions]):
    name = "fedhome"
    message_kind = "fedhome/model"

    def __init__(self, ctx: DeviceContext, options: FedHomeOptions) -> None:
        super().__init__(ctx, options)
        self.balanced: tuple[torch.Tensor, torch.Tensor] | None = None
        self.balanced_for: list[int] | None = None   # the visible classes it was drawn from
        self.at_start: dict[str, torch.Tensor] | None = None  # the model when the fine-tune began
        self.fine_tuned = 0                           # fine-tune rounds run
        if options.balance == "representation":
            feature_dim(ctx.model, ctx.model_name)    # refused here without features() and a Linear head

    @classmethod
    def device_bytes(cls, options: BaseOptions, facts: DeviceFacts) -> float:
        """Gossip averaging's, plus the model as the fine-tune began and the balanced set: SMOTE
        fills the smaller classes up to the largest, float32 rows of at most the input's width,
        bounded here by the device's own data arrays (float64) once more."""
        return super().device_bytes(options, facts) + facts.model_bytes + facts.data_bytes

    @classmethod
    def requirements(cls, options: BaseOptions) -> list[Requirement]:
        """SMOTE (imbalanced-learn, the ``smote`` extra), for a run that fine-tunes."""
        return [SMOTE] if cast(FedHomeOptions, options).fine_tune_rounds > 0 else []

    def local_phase(self, round: int) -> bool:
        return round >= self.ctx.rounds - self.options.fine_tune_rounds

    def _visible_key(self) -> list[int] | None:
        visible = self.ctx.visible_classes
        return None if visible is None else sorted(visible)

    @torch.no_grad()
    def _inputs(self) -> torch.Tensor:
        """What SMOTE balances: the representation f(x) (frozen body) or the raw inputs."""
        ctx = self.ctx
        if self.options.balance == "input":
            return ctx.x_train
        ctx.model.eval()
        features: Callable[[torch.Tensor], torch.Tensor] = getattr(ctx.model, "features")   # checked in __init__
        return features(ctx.x_train)

    def balanced_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The SMOTE-balanced fine-tune set, drawn when the fine-tune starts and again whenever
        the device's training data change (a class returns)."""
        key = self._visible_key()
        if self.balanced is None or self.balanced_for != key:
            ctx = self.ctx
            x, y = smote_balance(self._inputs().numpy(), ctx.y_train.numpy(), self.options.smote_k,
                                 seed=int(ctx.rng.integers(2**31)))
            self.balanced = (torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.int64))
            self.balanced_for = key
        return self.balanced

    def train(self, round: int) -> TrainingWork:
        """Plain training until the local phase; then the fine-tune on the balanced set: the
        head on the frozen body's representations (or the whole model on balanced inputs)."""
        if not self.local_phase(round):
            return self.training_job()
        ctx = self.ctx
        if self.at_start is None:
            self.at_start = model_state(ctx.model)
        x, y = self.balanced_set()
        self.fine_tuned += 1
        if self.options.balance == "input":
            return self.training_job(x=x, y=y)
        return self.training_job(model=head_of(ctx.model, ctx.model_name), x=x, y=y)

    def state_dict(self) -> dict[str, Any]:
        balanced = None if self.balanced is None else [t.clone() for t in self.balanced]
        at_start = None if self.at_start is None else {k: v.clone() for k, v in self.at_start.items()}
        return {**super().state_dict(), "balanced": balanced, "balanced_for": self.balanced_for,
                "at_start": at_start, "fine_tuned": self.fine_tuned}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        b, start = state["balanced"], state["at_start"]
        self.balanced = None if b is None else (b[0].clone(), b[1].clone())
        self.balanced_for = None if state["balanced_for"] is None else list(state["balanced_for"])
        self.at_start = None if start is None else {k: v.clone() for k, v in start.items()}
        self.fine_tuned = int(state["fine_tuned"])

    def stats(self) -> dict[str, Any]:
        """Fine-tune rounds run; once it started, the balanced set (samples, of which SMOTE's,
        and classes) and how far the head and the body moved since (L2): the reference trains
        the head only, so its body moves 0."""
        out: dict[str, Any] = {**super().stats(), "fine_tuned_rounds": self.fine_tuned}
        if self.balanced is None or self.at_start is None:
            return out
        labels = self.balanced[1]
        _, head = split_body_head(self.ctx.model, 1, self.ctx.model_name)
        moved = {"head": 0.0, "body": 0.0}
        for name, p in self.ctx.model.named_parameters():
            moved["head" if name in head else "body"] += float(((p.detach() - self.at_start[name]) ** 2).sum())
        return {**out, "balanced_samples": int(labels.shape[0]),
                "smote_added_samples": int(labels.shape[0] - self.ctx.num_samples),
                "balanced_classes": int(torch.unique(labels).numel()),
                "head_change_l2": moved["head"] ** 0.5, "body_change_l2": moved["body"] ** 0.5}
