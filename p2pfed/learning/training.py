"""Local training and evaluation of one device's model on its own data."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from p2pfed.learning.metrics import macro_f1_accuracy_present
from p2pfed.learning.sgd import sgd_step

# An optional extra term added to the cross-entropy (FedProx, Ditto, prototype regularisers).
# It receives the model, the batch inputs, the batch labels and the logits.
ExtraLoss = Callable[[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


# While set (``counting_work``), every ``train_epochs`` call notes what it trained: (model,
# samples, epochs, input width). The energy model uses it for the work a method does inside
# ``train`` itself.
Work = tuple[nn.Module, int, int, int]
_WORK: ContextVar[list[Work] | None] = ContextVar("p2pfed_training_work", default=None)


@contextmanager
def counting_work() -> Iterator[list[Work]]:
    """Note the (model, samples, epochs, input width) of every training run in this block."""
    log: list[Work] = []
    token = _WORK.set(log)
    try:
        yield log
    finally:
        _WORK.reset(token)


@dataclass(frozen=True)
class TrainingConfig:
    epochs: int = 1
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    optimizer: str = "sgd"   # or "adam"


@dataclass(frozen=True)
class Evaluation:
    f1_macro: float
    loss: float
    accuracy: float
    f1_present: float = float("nan")   # macro-F1 over the test set's classes only (metrics.py)


def train_epochs(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    config: TrainingConfig,
    generator: torch.Generator,
    extra_loss: ExtraLoss | None = None,
    epochs: int | None = None,
    trainable: list[nn.Parameter] | None = None,
    model_generator: torch.Generator | None = None,
    gradient_masks: Mapping[str, torch.Tensor] | None = None,
) -> float:
    """Mini-batch SGD (``config.optimizer`` "adam": Adam) for ``epochs`` (default
    ``config.epochs``); returns the mean batch loss.

    Momentum (Adam's moments) starts afresh each call: after fusion the parameters have moved, so
    momentum from the previous round would point the wrong way. The update is ``torch.optim.SGD``'s, written out
    (``learning/sgd.py``: bit-identical, without building an optimiser per call). A model's own
    randomness (dropout) draws from ``model_generator`` (``model_randomness``).
    ``gradient_masks`` (by parameter name, each of its parameter's shape) multiply those
    parameters' gradients before every step: an element masked with 0 does not train.
    """
    n = int(x.shape[0])
    if n == 0:
        return float("nan")
    if (work := _WORK.get()) is not None:
        work.append((model, n, config.epochs if epochs is None else epochs, int(x.shape[1])))
    with model_randomness(model_generator):
        return _train_epochs(model, x, y, config, generator, extra_loss, epochs, trainable, gradient_masks)


@contextmanager
def model_randomness(generator: torch.Generator | None) -> Iterator[None]:
    """While a model trains, torch's global generator — what dropout and other random layers draw
    from — continues ``generator``'s stream (the device's own), which then continues from where
    the model left it; the global generator is restored after. So a model's randomness is
    reproducible and each device's own, whatever else runs in the process. None: untouched."""
    if generator is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.random.set_rng_state(generator.get_state())
        try:
            yield
        finally:
            generator.set_state(torch.random.get_rng_state())


def _train_epochs(model: nn.Module, x: torch.Tensor, y: torch.Tensor, config: TrainingConfig,
                  generator: torch.Generator, extra_loss: ExtraLoss | None, epochs: int | None,
                  trainable: list[nn.Parameter] | None,
                  gradient_masks: Mapping[str, torch.Tensor] | None) -> float:
    n = int(x.shape[0])
    params = trainable if trainable is not None else list(model.parameters())
    masks = _masks_by_position(model, params, gradient_masks)
    named = {str(i): p for i, p in enumerate(params)}
    momentum = {k: torch.zeros_like(p) for k, p in named.items()} if config.momentum != 0 else None
    adam = make_adam(params, config) if config.optimizer == "adam" else None
    model.train()
    losses = []
    for _ in range(config.epochs if epochs is None else epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, config.batch_size):
            idx = order[start:start + config.batch_size]
            xb, yb = x[idx], y[idx]
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            if extra_loss is not None:
                loss = loss + extra_loss(model, xb, yb, logits)
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            if masks:
                grads = tuple(g if g is None or i not in masks else g * masks[i] for i, g in enumerate(grads))
            if adam is None:
                sgd_step(named, dict(zip(named, grads, strict=True)), config, momentum)
            else:
                adam_step(adam, params, grads)
            losses.append(float(loss.detach()))
    return float(np.mean(losses)) if losses else float("nan")


def checked_gradient_masks(model: nn.Module, gradient_masks: Mapping[str, torch.Tensor]
                           ) -> dict[str, nn.Parameter]:
    """The parameters ``gradient_masks`` name, by name; refuses a name that is no parameter of
    ``model`` and a mask not of its parameter's shape."""
    named = dict(model.named_parameters())
    unknown = sorted(set(gradient_masks) - set(named))
    if unknown:
        raise ValueError(f"gradient masks for {unknown}, which are not parameters of the model")
    for name, mask in gradient_masks.items():
        if tuple(mask.shape) != tuple(named[name].shape):
            raise ValueError(f"gradient mask for {name!r} has shape {tuple(mask.shape)}, "
                             f"the parameter {tuple(named[name].shape)}")
    return {name: named[name] for name in gradient_masks}


def _masks_by_position(model: nn.Module, params: list[nn.Parameter],
                       gradient_masks: Mapping[str, torch.Tensor] | None) -> dict[int, torch.Tensor]:
    """``gradient_masks`` (checked) keyed by each parameter's position in ``params``."""
    if not gradient_masks:
        return {}
    position = {id(p): i for i, p in enumerate(params)}
    return {position[id(p)]: gradient_masks[name].to(p.dtype)
            for name, p in checked_gradient_masks(model, gradient_masks).items() if id(p) in position}


def make_adam(params: Iterable[nn.Parameter], config: TrainingConfig) -> torch.optim.Adam:
    """``torch.optim.Adam`` with the configuration's lr and weight decay, in its fused form: one
    pass over each parameter per step, where the multi-tensor form makes one per arithmetic
    operation of the update; it differs from the default loop only in float rounding (a test
    bounds it). The fused CPU kernel reads a tensor's memory as if it were contiguous, so a model
    with a non-contiguous parameter gets the default loop (``adam_step`` makes gradients contiguous)."""
    params = list(params)
    return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay,
                            fused=all(p.is_contiguous() for p in params))


def adam_step(adam: torch.optim.Optimizer, params: list[nn.Parameter], grads: tuple[torch.Tensor | None, ...]) -> None:
    """One step of ``adam`` with the given gradients, each made contiguous (``make_adam``); a
    parameter without one is skipped, as SGD skips it; no gradient is left on the parameters."""
    for p, g in zip(params, grads, strict=True):
        p.grad = None if g is None else g.contiguous()
    adam.step()
    for p in params:
        p.grad = None


@contextmanager
def evaluation_mode(models: Iterable[nn.Module]) -> Iterator[None]:
    """The models in eval mode for the block, then each back in the mode it had: a device is
    scored at two points of its round (after fusion, after training), and scoring must not change
    what the method does next."""
    models = list(models)
    modes = [m.training for m in models]
    for m in models:
        m.eval()
    try:
        yield
    finally:
        for m, mode in zip(models, modes, strict=True):
            m.train(mode)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Evaluation:
    """Macro-F1 (over the classes in the labels and predictions, as scikit-learn's
    ``f1_score(average="macro", zero_division=0)``), mean loss, accuracy, and macro-F1 over the
    classes in the labels only (``f1_present``)."""
    if x.shape[0] == 0:
        return Evaluation(float("nan"), float("nan"), float("nan"))
    with evaluation_mode([model]):
        logits = model(x)
    loss = float(F.cross_entropy(logits, y))
    pred = logits.argmax(dim=1)
    f1, accuracy, f1_present = macro_f1_accuracy_present(y, pred)
    return Evaluation(f1_macro=f1, loss=loss, accuracy=accuracy, f1_present=f1_present)


@torch.no_grad()
def per_class_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                       num_classes: int) -> np.ndarray:
    """Accuracy on each class's samples (NaN for classes without samples)."""
    model.eval()
    pred = model(x).argmax(dim=1) if x.shape[0] else y
    out = np.full(num_classes, np.nan)
    for c in range(num_classes):
        sel = y == c
        if bool(sel.any()):
            out[c] = float((pred[sel] == c).float().mean())
    return out
