"""The device-side algorithm interface: what one device does with its data, model and peers.

An algorithm never knows whether it runs in the SimPy simulation or in a real peer process.
It sees its local data, its model, the payloads peers sent it (with sender and age) and the
time the runtime tells it. One device loop (``p2pfed.device``) drives every runtime in the same
order each time a device acts — FedSub Alg. 1:

    fuse (if new payloads arrived)  →  evaluate (when due)  →  train  →  share

(``evaluation.when: after-training`` evaluates after ``train`` instead), and takes every incoming message in through one intake that ends in ``receive``. A method keeps
everything it needs between rounds behind ``state_dict`` / ``load_state_dict``, so checkpoints
restore it exactly. A new method is one file with one subclass registered by name.
"""

from __future__ import annotations

import json
from abc import ABC
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn
from pydantic import BaseModel, ConfigDict

from p2pfed.algorithms.payloads import Payload, Received
from p2pfed.algorithms.state import model_state, received_from_state, received_state
from p2pfed.data import DeviceData
from p2pfed.learning.batched_fusion import FusionJob
from p2pfed.learning.batched_training import TrainingJob
from p2pfed.learning.model import MLP
from p2pfed.learning.training import Evaluation, TrainingConfig, evaluate, train_epochs


# A fusion job still waiting for work done elsewhere: call it to get the job (None: nothing to do).
LaterFusion = Callable[[], FusionJob | None]


class ArtifactError(ValueError):
    """A peer's payload does not fit the local model (wrong fields, shapes or values)."""


class Options(BaseModel):
    """Method-specific scenario keys under ``algorithm:``; subclasses add fields."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


@dataclass
class DeviceContext:
    """Everything local to one device that an algorithm may use."""

    device: DeviceData
    num_classes: int
    model: MLP
    training: TrainingConfig
    rng: np.random.Generator
    torch_generator: torch.Generator
    rounds: int  # total rounds of the run: methods with a final local phase need to know the end
    shared: dict[str, Any] = field(default_factory=dict)  # runtime-wide memo tables (content-keyed)
    # The devices this one can reach right now, as the runtime sees them (set by the runtime).
    neighbours: Callable[[], list[int]] | None = None
    # The seed every device's initial model was drawn from: a method with extra shared modules
    # (FedAli's prototypes and GLU) draws their initial values from it, so all devices start alike.
    model_seed: int = 0
    # evaluation.generalization: the other devices' pooled test data (features, labels), or None.
    generalization_data: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None
    # Dynamic data: hidden classes leave the test set too, and come back to both sets together
    # (FedSub ubiquitous Sec. 4.4); False keeps every class in the test set throughout.
    hide_test_classes: bool = True

    def __post_init__(self) -> None:
        self._x_all = torch.as_tensor(self.device.x_train, dtype=torch.float32)
        self._y_all = torch.as_tensor(self.device.y_train, dtype=torch.int64)
        self.x_train, self.y_train = self._x_all, self._y_all
        self.visible_classes: frozenset[int] | None = None  # None: all training data
        self._x_test_all = torch.as_tensor(self.device.x_test, dtype=torch.float32)
        self._y_test_all = torch.as_tensor(self.device.y_test, dtype=torch.int64)
        self.x_test, self.y_test = self._x_test_all, self._y_test_all

    @property
    def device_id(self) -> int:
        return self.device.device_id

    @property
    def num_samples(self) -> int:
        return int(self.y_train.shape[0])

    @contextmanager
    def evaluating_on(self, x: torch.Tensor, y: torch.Tensor) -> Iterator[None]:
        """Point the test split at other data for the duration: every method's ``evaluate``
        scores its model on ``ctx.x_test``/``y_test``, so this measures the same model elsewhere
        (generalization) without each method knowing about it."""
        saved = self.x_test, self.y_test
        self.x_test, self.y_test = x, y
        try:
            yield
        finally:
            self.x_test, self.y_test = saved

    def set_visible_classes(self, classes: frozenset[int] | None) -> bool:
        """Restrict the training data — and, with ``hide_test_classes``, the test data — to
        ``classes`` (None: all of it), for data that appears over time. Called by the runtime at
        the start of a round, so everything computed from the data afterwards (training,
        prototypes, subnetworks, scores, evaluations) sees the new data. Returns whether the data
        changed. Methods must read the data here, never ``device.x_train`` (all of it)."""
        classes = None if classes is None else frozenset(int(c) for c in classes)
        if classes == self.visible_classes:
            return False
        self.visible_classes = classes
        if classes is None:
            self.x_train, self.y_train = self._x_all, self._y_all
            self.x_test, self.y_test = self._x_test_all, self._y_test_all
            return True
        wanted = torch.as_tensor(sorted(classes), dtype=torch.int64)
        keep = torch.isin(self._y_all, wanted)
        self.x_train, self.y_train = self._x_all[keep], self._y_all[keep]
        if self.hide_test_classes:
            keep = torch.isin(self._y_test_all, wanted)
            self.x_test, self.y_test = self._x_test_all[keep], self._y_test_all[keep]
        return True


class Algorithm(ABC):
    """One device's learning method. Subclasses override the hooks they need.

    Each time the device acts, the device loop calls ``fuse`` (only if new payloads arrived since
    the last fusion, through ``fuse_new``), ``train`` (if the device takes part), ``evaluate``
    (when an evaluation is due) and ``share`` / ``share_parts``; payloads from peers reach
    ``receive`` in between, after the intake's checks.
    """

    name: ClassVar[str]
    message_kind: ClassVar[str]
    Options: ClassVar[type[Options]] = Options
    # Share in parts on every link, not only where transfers may be cut: set by a method whose
    # parts go to different peers (a part with ``meta['to']`` goes to that peer alone).
    parts_always: bool = False

    def __init__(self, ctx: DeviceContext, options: Options) -> None:
        self.ctx = ctx
        self.options = options
        # Newest payload per peer (a method receiving its shares in parts keys those by (peer, part)).
        self.cache: dict[Hashable, Received] = {}
        # What a method decoded from a cache entry, under the entry's key; the TTL drops both.
        self.parsed: dict[Hashable, Any] = {}

    # -- hooks -------------------------------------------------------------------------------
    def train(self, round: int) -> None:
        """Local training; the default is plain cross-entropy SGD for the configured epochs."""
        train_epochs(self.ctx.model, self.ctx.x_train, self.ctx.y_train, self.ctx.training,
                     self.ctx.torch_generator)

    def training_job(self, round: int) -> TrainingJob | None:
        """This round's training as a plain job (cross-entropy SGD on the whole model, nothing
        device-specific beyond its data and stream) that a runtime may batch with other devices',
        instead of calling ``train``; None: the method trains its own way. A method that keeps the
        default ``train`` is plain by definition and offers the job; one that overrides ``train``
        offers none unless it overrides this too, for the rounds where its training is plain."""
        plain = getattr(self.train, "__func__", None) is Algorithm.train   # not overridden anywhere
        return self.plain_training_job() if plain else None

    def plain_training_job(self) -> TrainingJob:
        """The default ``train`` as a job: ``job.run()`` is exactly ``Algorithm.train``."""
        ctx = self.ctx
        return TrainingJob(ctx.model, ctx.x_train, ctx.y_train, ctx.training, ctx.torch_generator)

    def share(self, round: int) -> Payload | None:
        """The payload to send to the peers this round (None: nothing to send)."""
        return None

    def share_parts(self, round: int) -> list[Payload]:
        """The share split into separately useful messages (``meta['part']`` names each), so
        that a short contact can still deliver the small ones; the default is ``[share()]``."""
        payload = self.share(round)
        return [] if payload is None else [payload]

    def check_payload(self, payload: Payload) -> None:
        """Raise ArtifactError if a peer's payload does not fit this device's model."""

    def receive(self, item: Received) -> None:
        """Validate a peer's payload and keep the newest one per peer."""
        self.check_payload(item.payload)
        old = self.cache.get(item.sender)
        if old is None or (item.round, item.sent_at) >= (old.round, old.sent_at):
            self.cache[item.sender] = item

    def fuse(self, round: int, now: float) -> None:
        """Integrate what peers sent. The default runs ``fusion_job``'s job; a method whose fusion
        is not a weighted sum of parameter rows overrides this instead."""
        job = self.fusion_job(round, now)
        if job is not None:
            job.run()

    def fusion_job(self, round: int, now: float) -> FusionJob | None:
        """This fusion with its bookkeeping done and its arithmetic — weighted sums of parameter
        rows — left as a job that a runtime may run together with other devices'
        (``run_fusion_jobs``); None: nothing to compute (the default: a purely local method)."""
        return None

    @classmethod
    def prepare_fusions(cls, algorithms: Sequence[Algorithm], nows: Sequence[float], *,
                        ahead: bool = False) -> None:
        """Work that the fusions of several devices of this method, about to start at the same
        instant (device i at ``nows[i]``), can do as one computation; each one's
        ``start_fusion``, called next, finds it done. ``ahead``: the runtime finishes those
        fusions later, so the work may be sent elsewhere and collected then. It must change no
        result, only where and when it is computed. The default: none (FedSub runs the
        devices' K sweeps in one call, or sends them to a helper process)."""

    def start_fusion(self, round: int, now: float) -> FusionJob | LaterFusion | None:
        """What the device loop calls: the job of a method that fuses through ``fusion_job``, or
        the whole ``fuse`` of one that overrides it (None then: nothing left). The artifacts the
        fusion uses are taken now (``take_fresh``); a method whose job needs work still under
        way elsewhere returns a ``LaterFusion`` that yields the job once it is back."""
        if type(self).fuse is Algorithm.fuse:
            return self.fusion_job(round, now)
        self.fuse(round, now)
        return None

    def evaluated_model(self) -> nn.Module:
        """The model this device would use, and is scored on (a runtime may score many devices'
        together); the default is the trained and fused model."""
        return self.ctx.model

    def evaluate(self) -> Evaluation:
        return evaluate(self.evaluated_model(), self.ctx.x_test, self.ctx.y_test)

    def scored_model(self) -> nn.Module | None:
        """What a runtime scoring many devices together scores for this one: the
        ``evaluated_model``, or None for a method that overrides ``evaluate`` (it scores itself)."""
        return self.evaluated_model() if type(self).evaluate is Algorithm.evaluate else None

    def stats(self) -> dict[str, Any]:
        """Method-specific numbers worth reporting (averaged over devices in summary.json)."""
        return {}

    @classmethod
    def scenario_problems(cls, options: Options, *, rounds: int, layers: int) -> list[str]:
        """Options that cannot work with the scenario's ``rounds`` (per device) or the model's
        number of ``layers``, one 'field: problem' line each; ``p2pfed validate`` reports them."""
        return []

    # -- state: everything kept between rounds ---------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything this device keeps between rounds, as checkpoint data (tensors, numbers,
        strings, lists, dicts): model, random streams, visible classes and the cache with its
        fresh marks. Methods with more state extend it (call ``super()``)."""
        ctx = self.ctx
        visible = ctx.visible_classes
        return {"model": model_state(ctx.model),
                "torch_rng": ctx.torch_generator.get_state(),
                "numpy_rng": json.dumps(ctx.rng.bit_generator.state),
                "visible_classes": None if visible is None else sorted(visible),
                "cache": [received_state(self.cache[k]) for k in sorted(self.cache, key=_peer_order)]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned; the device then continues exactly."""
        ctx = self.ctx
        ctx.model.load_state_dict(state["model"])
        ctx.torch_generator.set_state(state["torch_rng"])
        ctx.rng.bit_generator.state = json.loads(state["numpy_rng"])
        visible = state["visible_classes"]
        ctx.set_visible_classes(None if visible is None else frozenset(visible))
        self.cache.clear()
        self.parsed.clear()
        for saved in state["cache"]:
            item = received_from_state(saved)
            self.receive(item)   # the method rebuilds whatever it derives from its cache
            item.fresh = saved["fresh"]

    # -- what the device loop calls ----------------------------------------------------------
    def has_new(self) -> bool:
        """Whether a payload arrived that no fusion has used yet."""
        return any(r.fresh for r in self.cache.values())

    def fuse_new(self, round: int, now: float) -> list[Received]:
        """Fuse, and return the payloads that this fusion used for the first time."""
        before = [r for r in self.cache.values() if r.fresh]
        self.fuse(round, now)
        return [r for r in before if not r.fresh]

    # -- helpers for subclasses ------------------------------------------------------------
    def drop_stale(self, now: float, max_age_s: float | None) -> list[Hashable]:
        """Forget cached payloads older than ``max_age_s`` (the TTL), and what was decoded from
        them; returns the keys dropped."""
        if max_age_s is None:
            return []
        stale = [k for k, r in self.cache.items() if r.age(now) > max_age_s]
        for key in stale:
            del self.cache[key]
            self.parsed.pop(key, None)
        return stale

    def take_fresh(self) -> list[Received]:
        """Cached payloads not used by a fusion yet, marked used, in sender order."""
        fresh = [self.cache[s] for s in sorted(self.cache, key=_peer_order) if self.cache[s].fresh]
        for item in fresh:
            item.fresh = False
        return fresh


def _peer_order(key: Hashable) -> tuple:
    """Cache keys in peer order: a peer id, or (peer id, part name)."""
    return key if isinstance(key, tuple) else (key, "")


ALGORITHMS: dict[str, type[Algorithm]] = {}


def prepare_fusions(algorithms: Sequence[Algorithm], nows: Sequence[float], *, ahead: bool = False) -> None:
    """``Algorithm.prepare_fusions`` for devices about to fuse together, each method's devices
    in one call."""
    by_method: dict[type[Algorithm], tuple[list[Algorithm], list[float]]] = {}
    for algo, now in zip(algorithms, nows, strict=True):
        algos, times = by_method.setdefault(type(algo), ([], []))
        algos.append(algo)
        times.append(now)
    for method, (algos, times) in by_method.items():
        method.prepare_fusions(algos, times, ahead=ahead)


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: make a method available by its ``name`` in scenarios and the CLI."""
    if cls.name in ALGORITHMS:
        raise ValueError(f"algorithm {cls.name!r} registered twice")
    ALGORITHMS[cls.name] = cls
    return cls


def algorithm_class(name: str) -> type[Algorithm]:
    """Look up a registered method, with the valid names in the error."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; choose one of: "
                         f"{', '.join(sorted(ALGORITHMS))}") from None


def expect_array(payload: Payload, name: str, shape: tuple[int, ...] | None = None,
                 kinds: str = "f", check: Callable[[np.ndarray], bool] | None = None) -> np.ndarray:
    """Fetch a tensor from a payload, raising ArtifactError naming the field if it is off."""
    arr = payload.tensors.get(name)
    if arr is None:
        raise ArtifactError(f"missing tensor {name!r}")
    if arr.dtype.kind not in kinds:
        raise ArtifactError(f"tensor {name!r} has dtype {arr.dtype}, expected kind {kinds!r}")
    if shape is not None and tuple(arr.shape) != tuple(shape):
        raise ArtifactError(f"tensor {name!r} has shape {tuple(arr.shape)}, expected {tuple(shape)}")
    if check is not None and not check(arr):
        raise ArtifactError(f"tensor {name!r} has invalid values")
    return arr
