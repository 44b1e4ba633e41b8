"""Local training of many devices' models as one batched computation.

Devices that train at the same simulated instant each run a few small SGD steps on a small MLP;
one model at a time, the cost is mostly per-step overhead (optimiser, autograd, Python), not
arithmetic. Here the models that share an architecture and a training configuration are stacked
along a leading device dimension and trained together: one forward, one backward and one
parameter update per step for the whole group, the model's own forward run over the stacked
parameters. The project's MLP runs its forward as grouped matmuls (``torch.baddbmm``): with both
cores busy (``engine.torch_threads: auto``) that trains the quickstart's 36 devices ~1.25x faster
than the library path, ``torch.func.functional_call`` under ``torch.vmap``, which stays for any
other module and as the reference a test compares against (``bench/batched_training_bench.py``).

The result equals ``train_epochs`` run on each device in turn (to float rounding; a test compares
them): each device's shuffling order is drawn from its own generator, in the same order the loop
draws it (one ``randperm`` per epoch); a device with fewer batches makes no update in the steps
it lacks; its last, partial batch's loss is the mean over its real rows; SGD with the same lr,
momentum and weight decay, its momentum starting afresh each call.

A model with buffers (the CNN's batch norm and its running statistics) trains batched too: its
buffers are stacked like its parameters, passed to ``functional_call`` and updated in place
under ``vmap``. Batch statistics must see only a device's real rows, so each step runs once per
run of devices whose batches hold the same number of rows (devices are sorted by size, so these
are contiguous slices: every full batch together, then each partial size), never on padding.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from p2pfed.learning.mlp_backprop import mlp_sgd_step
from p2pfed.learning.model import MLP
from p2pfed.learning.sgd import sgd_step
from p2pfed.learning.training import ExtraLoss, TrainingConfig, checked_gradient_masks, train_epochs


@dataclass(frozen=True)
class TrainingJob:
    """One device's training this round, for the runtime to run: SGD of ``model`` on (x, y) for
    ``epochs`` (default the configuration's), drawing its shuffles from ``generator`` and the
    model's own randomness (dropout) from ``model_generator``; only the ``trainable`` parameters
    (default all) change. A *plain* job — cross-entropy by SGD, no ``extra_loss`` — can be batched
    with other devices' (``train_jobs``); any other runs alone. ``then`` runs once it has trained,
    and ``followed_by`` trains after that: a round in phases (a head, then a body), each phase
    batched across the devices that have it. ``gradient_masks`` (by parameter name, 0/1 of its
    shape) multiply those gradients before every step, so masked elements stay as they are
    (a pruned sub-model trains, its pruned units frozen)."""

    model: nn.Module
    x: torch.Tensor
    y: torch.Tensor
    config: TrainingConfig
    generator: torch.Generator
    epochs: int | None = None
    extra_loss: ExtraLoss | None = None
    trainable: tuple[nn.Parameter, ...] | None = None
    model_generator: torch.Generator | None = None
    then: Callable[[], None] | None = None
    followed_by: TrainingJob | None = None
    gradient_masks: Mapping[str, torch.Tensor] | None = None

    @property
    def num_epochs(self) -> int:
        return self.config.epochs if self.epochs is None else self.epochs

    @property
    def plain(self) -> bool:
        return self.extra_loss is None and self.config.optimizer == "sgd"

    def run(self) -> float:
        """Train this device alone (the reference the batched path must equal), then ``then``,
        then the job that follows, if any; returns the last phase's mean batch loss."""
        loss = self.train()
        self.finish()
        return loss if self.followed_by is None else self.followed_by.run()

    def train(self) -> float:
        return train_epochs(self.model, self.x, self.y, self.config, self.generator,
                            extra_loss=self.extra_loss, epochs=self.epochs,
                            trainable=None if self.trainable is None else list(self.trainable),
                            model_generator=self.model_generator, gradient_masks=self.gradient_masks)

    def finish(self) -> None:
        if self.then is not None:
            self.then()

    def phases(self) -> list[TrainingJob]:
        """This job and the jobs that follow it, in order."""
        out: list[TrainingJob] = [self]
        while out[-1].followed_by is not None:
            out.append(out[-1].followed_by)
        return out

    def trainable_names(self, named: Sequence[tuple[str, nn.Parameter]] | None = None) -> tuple[str, ...]:
        """The names of the parameters this job trains, in the model's order (``named``: the
        model's ``named_parameters``, when the caller has them)."""
        named = list(self.model.named_parameters()) if named is None else named
        if self.trainable is None:
            return tuple(name for name, _ in named)
        chosen = {id(p) for p in self.trainable}
        names = tuple(name for name, p in named if id(p) in chosen)
        if len(names) != len(chosen):
            raise ValueError("a training job's trainable parameters must be parameters of its model")
        return names

    def group_key(self) -> tuple:
        """Jobs with equal keys can train as one batch: same model class, parameter shapes,
        trainable parameters, masked gradients and training configuration."""
        named = list(self.model.named_parameters())
        shapes = tuple((name, tuple(p.shape), p.dtype) for name, p in named)
        masked = tuple(sorted(self.gradient_masks or ()))
        return (type(self.model), shapes, self.trainable_names(named), masked, self.config, self.num_epochs)

    def batchable(self) -> bool:
        """Plain, with data, and a forward that runs over stacked parameters and buffers
        (``torch.vmap``) without random draws: a model with dropout, or one ``vmap`` cannot run,
        trains one device at a time."""
        if not self.plain or self.x.shape[0] == 0:
            return False
        return _stackable(self.model, self.x, self.group_key())


_STACKABLE: dict[tuple, bool] = {}


def _stackable(model: nn.Module, x: torch.Tensor, key: tuple) -> bool:
    """Whether ``model``'s forward runs over stacked parameters: the project's MLP does; any
    other module is tried once per architecture on one sample, in training mode, under
    ``torch.vmap`` (which refuses random draws), and remembered."""
    if type(model) is MLP:
        return True
    found = _STACKABLE.get(key)
    if found is None:
        was_training = model.training
        model.train()
        try:
            with torch.no_grad():
                params = {n: p.detach().unsqueeze(0) for n, p in model.named_parameters()}
                buffers = {n: b.detach().clone().unsqueeze(0) for n, b in model.named_buffers()}   # left untouched
                vmap_forward_with_buffers(model)(params, buffers, x[:1].unsqueeze(0))
            found = True
        except Exception:   # randomness under vmap, data-dependent control flow, ...
            found = False
        finally:
            model.train(was_training)
        _STACKABLE[key] = found
    return found


# At most this many devices train (or are evaluated) as one stacked computation: a group's stacked
# parameters, gradients and activations are transient copies of every member's model, so a round
# of ten thousand devices stacked at once needed several models' worth of memory per device on top
# of what the devices keep. On one thread the MLP's grouped products give each device its own
# slice, so a split changes no trained bit; with more threads, and for ``vmap``'s convolutions and
# the loss's per-device sums, the arithmetic follows the batch's size: the same to float rounding
# (a test compares chunked and whole groups). A thousand devices already amortise the per-step
# overhead that batching removes.
GROUP_LIMIT = 1024


def chunks(members: Sequence[int], limit: int = GROUP_LIMIT) -> list[Sequence[int]]:
    """``members`` in consecutive pieces of at most ``limit``."""
    return [members[start:start + limit] for start in range(0, len(members), limit)]


def train_jobs(jobs: Sequence[TrainingJob], *, min_group: int = 2, limit: int = GROUP_LIMIT) -> list[float]:
    """Run every job, those that can be batched together as one computation per group (of at
    most ``limit`` devices), then each one's ``then``; returns each job's mean batch loss (as
    ``train_epochs``), in ``jobs``' order."""
    losses: list[float] = [float("nan")] * len(jobs)
    groups: dict[tuple, list[int]] = {}
    for i, job in enumerate(jobs):
        if job.batchable():
            groups.setdefault(job.group_key(), []).append(i)
    batched = set()
    for members in groups.values():
        if len(members) >= min_group:
            for chunk in chunks(members, limit):
                for i, loss in zip(chunk, train_group([jobs[i] for i in chunk]), strict=True):
                    losses[i] = loss
            batched.update(members)
    for i, job in enumerate(jobs):
        losses[i] = losses[i] if i in batched else job.train()
    for job in jobs:
        job.finish()
    following = [job.followed_by for job in jobs if job.followed_by is not None]
    if following:   # the next phase, once every device has finished this one
        train_jobs(following, min_group=min_group, limit=limit)
    return losses


StackedForward = Callable[[dict[str, torch.Tensor], torch.Tensor], torch.Tensor]


def vmap_forward(template: nn.Module) -> StackedForward:
    """``template``'s own forward over stacked parameters (k, ...) and inputs (k, batch, ...)."""
    return torch.vmap(lambda params, x: functional_call(template, params, (x,)))


def vmap_forward_with_buffers(template: nn.Module) -> Callable[..., torch.Tensor]:
    """``template``'s forward over stacked parameters, stacked buffers (updated in place: batch
    norm's running statistics) and inputs (k, batch, ...)."""
    return torch.vmap(lambda params, buffers, x: functional_call(template, (params, buffers), (x,)))


def mlp_forward(template: MLP) -> StackedForward:
    """``MLP.forward`` without unit gates over stacked parameters, as grouped matmuls."""
    layers = len(template.layers)

    def forward(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        h = x
        for i in range(layers):
            h = torch.baddbmm(params[f"layers.{i}.bias"].unsqueeze(1), h,
                              params[f"layers.{i}.weight"].transpose(1, 2))
            if i < layers - 1:
                h = torch.relu(h)
        return h
    return forward


def stacked_forward(template: nn.Module) -> StackedForward:
    """Grouped matmuls for a plain MLP, ``vmap_forward`` for anything else."""
    if type(template) is MLP and template.gates is None:
        return mlp_forward(template)
    return vmap_forward(template)


def train_group(jobs: Sequence[TrainingJob], forward: Callable[[nn.Module], StackedForward] | None = None
                ) -> list[float]:
    """Train same-architecture, same-configuration jobs (all with data) as one batch: a plain
    MLP with its backward pass written out (``mlp_backprop``), anything else — or any model
    when ``forward`` is given — by autograd through ``forward`` (default ``stacked_forward``)."""
    config, epochs = jobs[0].config, jobs[0].num_epochs
    bs = config.batch_size
    sizes = [int(j.x.shape[0]) for j in jobs]
    # Devices in decreasing order of steps per epoch: at step t the devices still training are a
    # prefix, so each step works on views of the stacked parameters, never on padded devices.
    order = sorted(range(len(jobs)), key=lambda i: -sizes[i])
    jobs = [jobs[i] for i in order]
    sizes = [sizes[i] for i in order]
    template = jobs[0].model
    written_out = forward is None and type(template) is MLP and template.gates is None and not jobs[0].gradient_masks
    models = _StackedModels(jobs, jobs[0].trainable_names(), requires_grad=not written_out)
    momentum = ({n: torch.zeros_like(models.params[n]) for n in models.trainable} if config.momentum != 0 else None)

    x_all = torch.cat([j.x for j in jobs])
    y_all = torch.cat([j.y for j in jobs])
    steps = [-(-n // bs) for n in sizes]
    width = steps[0] * bs
    valid = torch.arange(width).unsqueeze(0) < torch.as_tensor(sizes).unsqueeze(1)   # (d, width)
    active_at = [sum(1 for s in steps if s > t) for t in range(steps[0])]
    shuffle = _Shuffler(jobs, sizes, width)
    step = _group_step(template, forward, written_out, models, momentum, config, x_all, y_all)
    for j in jobs:
        j.model.train()
    losses = torch.full((epochs * steps[0], len(jobs)), float("nan"), dtype=torch.float64)
    row = 0
    for _ in range(epochs):
        index = shuffle.epoch()
        for t in range(steps[0]):
            k = active_at[t]
            cols = slice(t * bs, (t + 1) * bs)
            losses[row, :k] = step(k, index[:k, cols], valid[:k, cols]).detach().to(torch.float64)
            row += 1
    models.write_back()
    with warnings.catch_warnings():   # a device whose every batch loss is NaN (a diverged model) means NaN
        warnings.filterwarnings("ignore", "Mean of empty slice", RuntimeWarning)
        means = np.nanmean(losses.numpy(), axis=0)   # NaN marks the steps a device had no batch for
    out = [0.0] * len(jobs)
    for i, original in enumerate(order):
        out[original] = float(means[i])
    return out


class _StackedModels:
    """The group's parameters and buffers stacked along a leading device dimension (in the
    template's order), trained in place, then copied back into each device's own model."""

    def __init__(self, jobs: Sequence[TrainingJob], trainable: Sequence[str], requires_grad: bool) -> None:
        template = jobs[0].model
        self.names = [name for name, _ in template.named_parameters()]
        self.trainable = list(trainable)   # the parameters the jobs train; the others stay as they are
        self.own = [list(j.model.parameters()) for j in jobs]   # in the order of ``names``
        self.buffer_names = [name for name, _ in template.named_buffers()]
        self.own_buffers = [list(j.model.buffers()) for j in jobs]
        with torch.no_grad():
            self.params = {n: torch.stack([params[k] for params in self.own]) for k, n in enumerate(self.names)}
            self.buffers = {n: torch.stack([b[k] for b in self.own_buffers]) for k, n in enumerate(self.buffer_names)}
        for n in self.trainable:
            self.params[n].requires_grad_(requires_grad)
        masks: list[Mapping[str, torch.Tensor]] = []
        for job in jobs:
            if job.gradient_masks:   # the same names across a group (``group_key``)
                checked_gradient_masks(job.model, job.gradient_masks)
                masks.append(job.gradient_masks)
        masked = sorted(set(masks[0] if masks else ()) & set(self.trainable))
        self.gradient_masks = {n: torch.stack([m[n] for m in masks]).to(self.params[n].dtype) for n in masked}

    def masked(self, grads: dict[str, torch.Tensor | None], devices: slice) -> dict[str, torch.Tensor | None]:
        """``grads`` of the ``devices`` with their gradient masks applied (``TrainingJob``)."""
        return {n: g if g is None or n not in self.gradient_masks else g * self.gradient_masks[n][devices]
                for n, g in grads.items()}

    def write_back(self) -> None:
        with torch.no_grad():
            for k, n in enumerate(self.names):
                if n not in self.trainable:
                    continue
                for device_params, trained in zip(self.own, self.params[n], strict=True):
                    device_params[k].copy_(trained)
            for k, n in enumerate(self.buffer_names):
                for device_buffers, kept in zip(self.own_buffers, self.buffers[n], strict=True):
                    device_buffers[k].copy_(kept)


GroupStep = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]


def _group_step(template: nn.Module, forward: Callable[[nn.Module], StackedForward] | None, written_out: bool,
                models: _StackedModels, momentum: dict[str, torch.Tensor] | None, config: TrainingConfig,
                x_all: torch.Tensor, y_all: torch.Tensor) -> GroupStep:
    """One SGD step of the first ``k`` devices on their batch (sample indices, which of them are
    real rows), returning each one's batch loss: per run of equal row counts for a model with
    buffers, the written-out MLP backward, or autograd through a stacked forward."""
    stacked = models.params
    if models.buffers:
        buffered_forward = vmap_forward_with_buffers(template)
        return lambda k, idx, valid: _steps_by_rows(buffered_forward, models, momentum, config,
                                                    valid.sum(1).tolist(), x_all, y_all, idx)
    if written_out:
        layers = len(cast(MLP, template).layers)
        plain_sgd = config.momentum == 0 and config.weight_decay == 0
        frozen = frozenset(models.names) - frozenset(models.trainable)

        def written_out_step(k: int, idx: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
            params = {n: p[:k] for n, p in stacked.items()}
            buffers = None if momentum is None else {n: b[:k] for n, b in momentum.items()}
            update = None if plain_sgd else (
                lambda n, p, g: sgd_step({n: p}, {n: g}, config, None if buffers is None else {n: buffers[n]}))
            return mlp_sgd_step(params, layers, x_all[idx], y_all[idx], valid.to(x_all.dtype), config, update, frozen)
        return written_out_step
    batched_forward = (forward or stacked_forward)(template)

    def autograd_step(k: int, idx: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        params = {n: p[:k] for n, p in stacked.items()}
        mask = valid.to(x_all.dtype)
        logits = batched_forward(params, x_all[idx])
        per_row = F.cross_entropy(logits.flatten(0, 1), y_all[idx].flatten(), reduction="none")
        per_device = (per_row.view(k, -1) * mask).sum(1) / mask.sum(1)
        trained = {n: params[n] for n in models.trainable}
        grads = torch.autograd.grad(per_device.sum(), list(trained.values()), allow_unused=True)
        with torch.no_grad():
            sgd_step(trained, models.masked(dict(zip(trained, grads, strict=True)), slice(0, k)), config,
                     None if momentum is None else {n: b[:k] for n, b in momentum.items()})
        return per_device
    return autograd_step


def _steps_by_rows(forward: Callable[..., torch.Tensor], models: _StackedModels,
                   momentum: dict[str, torch.Tensor] | None, config: TrainingConfig, rows: list[int],
                   x_all: torch.Tensor, y_all: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """One SGD step (``forward``: ``vmap_forward_with_buffers``) of the first ``len(rows)`` devices
    of a model with buffers, ``rows[d]`` real rows in device d's batch (non-increasing): one
    batched step per run of equal row counts, on slices of the stacked parameters, buffers and
    momentum (so updates land in place), batch statistics over real rows only. Returns each device's batch loss."""
    stacked, buffers = models.params, models.buffers
    losses = torch.empty(len(rows), dtype=x_all.dtype)
    start = 0
    while start < len(rows):
        end, count = start, rows[start]
        while end < len(rows) and rows[end] == count:
            end += 1
        params = {n: p[start:end] for n, p in stacked.items()}
        take = idx[start:end, :count]
        logits = forward(params, {n: b[start:end] for n, b in buffers.items()}, x_all[take])
        loss = F.cross_entropy(logits.flatten(0, 1), y_all[take].flatten(), reduction="none").view(end - start, count)
        per_device = loss.mean(1)
        trained = {n: params[n] for n in models.trainable}
        grads = torch.autograd.grad(per_device.sum(), list(trained.values()), allow_unused=True)
        with torch.no_grad():
            sgd_step(trained, models.masked(dict(zip(trained, grads, strict=True)), slice(start, end)), config,
                     None if momentum is None else {n: m[start:end] for n, m in momentum.items()})
        losses[start:end] = per_device.detach()
        start = end
    return losses


class _Shuffler:
    """Each epoch's batches: row ``d`` lists device ``d``'s samples (indices into the stacked data)
    in the order of a ``randperm`` from its own generator — the one draw per epoch the loop makes."""

    def __init__(self, jobs: Sequence[TrainingJob], sizes: list[int], width: int) -> None:
        self.generators = [j.generator for j in jobs]
        self.sizes = sizes
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
        self.device_of = torch.repeat_interleave(torch.arange(len(sizes)), torch.as_tensor(sizes))
        self.position = torch.cat([torch.arange(n) for n in sizes])
        self.width = width

    def epoch(self) -> torch.Tensor:
        """(devices, width) sample indices; positions past a device's size are 0 (masked out)."""
        index = torch.zeros((len(self.sizes), self.width), dtype=torch.int64)
        index[self.device_of, self.position] = torch.cat([
            torch.randperm(n, generator=g) + off
            for g, n, off in zip(self.generators, self.sizes, self.offsets, strict=True)])
        return index
