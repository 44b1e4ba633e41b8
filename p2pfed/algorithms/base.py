"""The device-side method interface: what one device does with its data, its model and its peers.

A method never knows whether it runs in the synchronous simulation, over contacts or in a real
peer process, nor whether its work is batched with other devices' or run alone: it describes
what it wants done, and the runtime decides how. One device loop (``p2pfed.device``) calls, each
time a device acts (FedSub Alg. 1, client side with the server's part on the device):

    fuse(fresh)  →  evaluate (when due)  →  train  →  share

(``evaluation.when: after-training`` evaluates after ``train``), and every message that reaches
the device goes through one intake that ends in the method's ``check``. The eight hooks a method
may override, each documented with an example in ``docs/writing-a-method.md``:

========================  ==========================================================================
``train(round)``          a ``TrainingJob`` for the runtime to run (batched where it can), or None
                          after training here
``fuse(fresh, r, now)``   a ``FusionJob`` (weighted sums of parameters, batched where it can), a
                          ``Deferred`` one (waiting for work sent to ``ctx.offload``), None after
                          fusing here, or ``NOT_READY``
``share(round)``          the payload(s) to send
``check(payload)``        validate a peer's payload; what it returns is kept as ``Received.parsed``
``evaluated_model()``     the model this device is scored on
``stats()``               numbers for ``summary.json``
``state_dict()``          everything the method keeps between rounds beyond the base state
``load_state_dict(s)``    restore it
========================  ==========================================================================

Everything else here is runtime plumbing a method may read (``ctx``, ``options``, ``cache``) or
call (``training_job``, ``drop_stale``), never override. Among what ``ctx`` offers:
``ctx.neighbours()`` (who is reachable now) and ``ctx.energy_left()`` (joules left in the
device's battery, None where the scenario gives none), for methods that adapt to either.
"""

from __future__ import annotations

import json
import weakref
from abc import ABC
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar, get_args, get_origin

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator
from torch import nn
from typing_extensions import TypeVar as DefaultTypeVar

from p2pfed.algorithms.memory import DeviceFacts, MemoryFacts, MemoryTerm
from p2pfed.algorithms.naming import default_name
from p2pfed.algorithms.payloads import Payload as Payload, Received as Received   # re-exported for methods
from p2pfed.algorithms.state import model_state, received_from_state, received_state
from p2pfed.data import DeviceData
from p2pfed.learning.batched_fusion import FusionJob
from p2pfed.learning.units import has_units
from p2pfed.learning.batched_training import TrainingJob
from p2pfed.learning.training import ExtraLoss, TrainingConfig
from p2pfed.extras import Requirement

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class ArtifactError(ValueError):
    """A peer's payload does not fit the local model (wrong fields, shapes or values)."""


@dataclass(frozen=True)
class RunFacts:
    """What an option may be checked against before anything runs (``Options`` validators read
    it from pydantic's validation context with ``run_facts``)."""

    method: str                 # ``algorithm.name``
    rounds: int                 # rounds a device runs (with contacts: trainings expected)
    model_name: str             # ``model.name``: "mlp" or a factory of the user's own
    mlp_layers: int | None      # the MLP's number of Linear layers; None for another model
    model_units: bool = True    # the model has units per layer (``learning/units.py``: the MLP, the CNN)
    batch_norm: bool = True     # False: ``model.name: cnn`` with ``model.options.batch_norm: false``


def run_facts(info: ValidationInfo) -> RunFacts | None:
    """The scenario facts an ``Options`` validator may check against (None outside a scenario)."""
    context = info.context
    return context.get("run") if isinstance(context, dict) else None


class Options(BaseModel):
    """Method-specific scenario keys under ``algorithm:``; subclasses add fields. A check that
    needs the scenario (its rounds, its model) is a ``model_validator(mode="after")`` taking
    ``info`` and reading ``run_facts(info)``; its message starts with the field at fault."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class UnitOptions(Options):
    """Options of a method that works on the units of a model's layers (neurons of a dense
    layer, channels of a convolution: ``learning/units.py``): a model without units is refused
    before the run."""

    @model_validator(mode="after")
    def _model_has_units(self, info: ValidationInfo) -> UnitOptions:
        facts = run_facts(info)
        if facts is not None and not facts.model_units:
            raise ValueError(f"model.name: {facts.method} works on the units of a model's layers (neurons, "
                             f"channels); use model.name: mlp or cnn (got {facts.model_name!r})")
        return self


def require_units(ctx: DeviceContext, method: str) -> nn.Module:
    """The device's model, which must have units (the run-time twin of ``UnitOptions``' check)."""
    if not has_units(ctx.model):
        raise ValueError(f"model.name: {method} works on the units of a model's layers (neurons, channels); "
                         f"use model.name: mlp or cnn (got {ctx.model_name!r})")
    return ctx.model


class Future(Protocol[T_co]):
    """Work under way (``ctx.offload``); ``result()`` waits for it."""

    def result(self) -> T_co: ...


class Offload(Protocol):
    """Somewhere to send work that need not be done now (``ctx.offload``). The runtime decides
    where it runs: here when its result is first asked for, or ahead in a helper process while
    the simulation goes on. Functions must be importable (module-level) and give the same result
    wherever they run."""

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]: ...

    def submit_many(self, fn: Callable[..., list[T]], items: Sequence[Any], **kwargs: Any) -> Future[list[T]]:
        """``fn(items, **kwargs)``, where ``fn`` maps a list of items to one result each, the
        same whatever else it is computed with: requests for the same ``fn`` and ``kwargs``
        waiting together may be computed in one call."""
        ...


class _Done(Generic[T]):
    def __init__(self, value: T) -> None:
        self._value = value

    def result(self) -> T:
        return self._value


class ComputeNow:
    """The simplest ``Offload``: everything computed at once, where it is submitted."""

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        return _Done(fn(*args, **kwargs))

    def submit_many(self, fn: Callable[..., list[T]], items: Sequence[Any], **kwargs: Any) -> Future[list[T]]:
        return _Done(fn(list(items), **kwargs))


@dataclass(frozen=True)
class Deferred:
    """A fusion waiting for work sent to ``ctx.offload``: the runtime calls ``then`` with the
    ``future``'s result when it needs the fusion's job (a window's end), so the work runs
    meanwhile — elsewhere, or together with other devices' requests."""

    future: Future[Any]
    then: Callable[[Any], FusionJob | None]

    def job(self) -> FusionJob | None:
        return self.then(self.future.result())


class NotReady:
    """``fuse`` returns ``NOT_READY`` when it cannot fuse yet (e.g. FedSub before it has
    artifacts of its own): the fresh payloads stay fresh and are offered again next time."""

    def __repr__(self) -> str:
        return "NOT_READY"


NOT_READY = NotReady()

TrainingWork = TrainingJob | None
FusionWork = FusionJob | Deferred | NotReady | None


@dataclass
class DeviceContext:
    """Everything local to one device that a method may use."""

    device: DeviceData
    num_classes: int
    model: nn.Module
    training: TrainingConfig
    rng: np.random.Generator                 # the device's numpy stream (part of its state)
    torch_generator: torch.Generator         # its torch stream: shuffling, sampled masks
    rounds: int  # total rounds of the run: methods with a final local phase need to know the end
    # The stream a model's own randomness (dropout) draws from while it trains, apart from
    # ``torch_generator`` so that a model without any draws the same numbers as before.
    model_rng: torch.Generator = field(default_factory=torch.Generator)
    model_name: str = "mlp"                   # ``model.name``, for messages naming it
    # Runtime-wide memo tables (content-keyed): devices simulated in one process share them.
    shared: dict[str, Any] = field(default_factory=dict)
    offload: Offload = field(default_factory=ComputeNow)   # where work may be sent (see Offload)
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
    # The energy left in this device's battery, as the runtime sees it (set by a runtime whose
    # scenario gives batteries, ``devices.battery_j``); read it through ``energy_left()``.
    battery: Callable[[], float | None] | None = None
    noted_flops: float = 0.0   # ``count_work`` since the runtime last took it

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

    def count_work(self, flops: float) -> None:
        """Arithmetic this method did outside its training and fusion jobs (an aggregation it
        runs inside ``fuse`` or ``train``, a clustering): charged as fusion work where the
        scenario models its devices' compute (``devices``), ignored otherwise."""
        self.noted_flops += float(flops)

    def energy_left(self) -> float | None:
        """Joules left in this device's battery now (None: no battery, or a runtime that does not
        model energy). An energy-aware method may share less when it runs low."""
        return None if self.battery is None else self.battery()

    @property
    def num_samples(self) -> int:
        return int(self.y_train.shape[0])

    def set_visible_classes(self, classes: frozenset[int] | None) -> bool:
        """Restrict the training data — and, with ``hide_test_classes``, the test data — to
        ``classes`` (None: all of it), for data that appears over time. Called by the runtime at
        the start of a round, so everything computed from the data afterwards sees the new data.
        Returns whether the data changed. Methods read the data here, never ``device.x_train``."""
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


# Inside ``Algorithm``, ``Options`` names its class attribute; its annotations say ``BaseOptions``.
BaseOptions = Options
# A method's options type: ``class MyMethod(Algorithm[MyOptions])``; plain ``Algorithm``: no options.
OptionsT = DefaultTypeVar("OptionsT", bound=Options, default=Options, covariant=True)


class Algorithm(ABC, Generic[OptionsT]):
    """One device's learning method: subclass it, with its options type as the parameter
    (``class MyMethod(Algorithm[MyOptions])``: ``Options`` and the type of ``self.options``
    both follow from it), and override the hooks you need (the module docstring lists them; the
    defaults give plain local training). A method others derive from with their own options
    takes a type variable bound to its options (``GossipAvg``), whose default is its own."""

    # What it is called in scenarios, logs and results tables, and the wire kind of its shares
    # unless ``message_kind`` says otherwise; a class that sets none inherits its parent's, and
    # one with no named parent is named after its class (``naming.default_name``). Both must
    # match the codec's kinds: ``[a-z0-9/_-]{1,64}``.
    name: ClassVar[str]
    message_kind: ClassVar[str] = ""          # the wire kind of its shares; default: ``name``
    Options: ClassVar[type[BaseOptions]] = Options   # set from the class's parameter
    options: OptionsT
    # The parts its shares may name (``meta['part']``; "whole" when unnamed): ``forwarding.parts``
    # may only name these.
    parts: ClassVar[tuple[str, ...]] = ("whole",)
    # True for a method whose hooks read a peer's payload only while it is fresh (``fuse``'s
    # ``fresh``), never an older one left in ``self.cache``: the runtime then empties each payload
    # once fused (``Received.spent_copy``), so a device keeps no peer's arrays between rounds.
    # A class that sets none is True only when every method class it derives from is, so a
    # method that reads ``self.cache`` (and a subclass that does) sets it False.
    reads_fresh_only: ClassVar[bool] = False

    def __init__(self, ctx: DeviceContext, options: OptionsT) -> None:
        self.ctx = ctx
        self.options = options
        # Newest payload per peer, or per (peer, part) for a share sent in parts; each entry's
        # ``parsed`` is what ``check`` returned for it.
        self.cache: dict[Hashable, Received] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "name", None) is None:   # neither set nor inherited (a wrapper keeps its method's)
            cls.name = default_name(cls.__name__)
        if "reads_fresh_only" not in cls.__dict__:
            cls.reads_fresh_only = all(b.reads_fresh_only for b in cls.__bases__
                                       if isinstance(b, type) and issubclass(b, Algorithm))
        declared = _declared_options(cls)
        if declared is not None and "Options" not in cls.__dict__:
            cls.Options = declared

    @classmethod
    def kind(cls) -> str:
        """The wire kind of this method's messages."""
        return cls.message_kind or cls.name

    @classmethod
    def memory_terms(cls, options: BaseOptions, facts: MemoryFacts) -> list[MemoryTerm]:
        """Lower bounds on the memory of the structures only this method builds, checked before a
        run (``algorithms/memory.py``); the default builds none worth checking."""
        return []

    @classmethod
    def device_bytes(cls, options: BaseOptions, facts: DeviceFacts) -> float:
        """Bytes one device of this method holds at a run's peak beyond its data and fixed
        overhead (``engine/footprint.py``, which adds training's transient copies itself), for
        the estimate that refuses a run too large: its model, a copy of its own, and every
        neighbour's payload twice (the newest cached, the next arriving). A method that keeps less
        (or more) says so, so the estimate stays above what its runs measure without refusing
        runs that fit."""
        return 2 * facts.model_bytes + 2 * facts.degree * facts.message_bytes

    @classmethod
    def requirements(cls, options: BaseOptions) -> list[Requirement]:
        """The optional packages it needs with these options (``p2pfed.extras``): loading a
        scenario refuses it where one is missing, in one line naming the extra to install."""
        return []

    # -- hooks -------------------------------------------------------------------------------
    def train(self, round: int) -> TrainingWork:
        """Local training: a job for the runtime (plain cross-entropy SGD on all of a module's
        parameters is batched with other devices'), or None after training here."""
        return self.training_job()

    def fuse(self, fresh: list[Received], round: int, now: float) -> FusionWork:
        """Integrate what peers sent; ``fresh``: the payloads no fusion has been given yet (they
        count as used from now on), in peer order; ``self.cache`` holds the newest of every peer.
        The default, a purely local method, ignores them."""
        return None

    def share(self, round: int) -> Payload | Sequence[Payload] | None:
        """What to send the peers this round: one payload, or parts (``meta['part']`` names
        each; a part with ``meta['to']`` goes to that peer alone). Where a transfer may be cut
        (contacts), parts travel as separate messages, small ones first; elsewhere the unaddressed
        parts travel as one."""
        return None

    def check(self, payload: Payload) -> Any:
        """Validate a peer's payload against this device's model, raising ``ArtifactError``;
        what it returns (e.g. the decoded arrays) is kept with the payload as ``parsed``."""
        return None

    def evaluated_model(self) -> nn.Module:
        """The model this device would use, and is scored on (the runtime may score many
        devices' at once); the default is the trained and fused model."""
        return self.ctx.model

    def stats(self) -> dict[str, Any]:
        """Method-specific numbers worth reporting (averaged over devices in summary.json)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Everything this device keeps between rounds, as checkpoint data (tensors, numbers,
        strings, lists, dicts): model, random streams, visible classes and the cache with its
        fresh marks. A method with more state extends it (``{**super().state_dict(), ...}``)."""
        ctx = self.ctx
        visible = ctx.visible_classes
        return {"model": model_state(ctx.model),
                "torch_rng": ctx.torch_generator.get_state(),
                "model_rng": ctx.model_rng.get_state(),
                "numpy_rng": json.dumps(ctx.rng.bit_generator.state),
                "visible_classes": None if visible is None else sorted(visible),
                "cache": [received_state(self.cache[k]) for k in sorted(self.cache, key=_peer_order)]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned; the device then continues exactly."""
        ctx = self.ctx
        ctx.model.load_state_dict(state["model"])
        ctx.torch_generator.set_state(state["torch_rng"])
        ctx.model_rng.set_state(state["model_rng"])
        ctx.rng.bit_generator.state = json.loads(state["numpy_rng"])
        visible = state["visible_classes"]
        ctx.set_visible_classes(None if visible is None else frozenset(visible))
        self.cache.clear()
        # one broadcast, one payload again; weak: a payload leaves with the last cache holding it
        interned = ctx.shared.setdefault("checkpoint/payloads", weakref.WeakValueDictionary())
        for saved in state["cache"]:
            item = received_from_state(saved, interned)
            if item.spent:   # fused and emptied: nothing to check
                self.cache[_cache_key(item)] = item
                continue
            self.receive(item)   # checked again: ``parsed`` is rebuilt
            item.fresh = saved["fresh"]

    # -- for methods to call -----------------------------------------------------------------
    def training_job(self, model: nn.Module | None = None, x: torch.Tensor | None = None,
                     y: torch.Tensor | None = None, *, epochs: int | None = None,
                     extra_loss: ExtraLoss | None = None, trainable: Sequence[nn.Parameter] | None = None,
                     then: Callable[[], None] | None = None,
                     followed_by: TrainingJob | None = None,
                     gradient_masks: Mapping[str, torch.Tensor] | None = None) -> TrainingJob:
        """A training job on this device's streams: by default plain SGD of ``ctx.model`` on its
        training data for the configured epochs. ``trainable`` trains only those parameters;
        ``gradient_masks`` (0/1 by parameter name) only those elements; ``extra_loss`` makes it a
        job the runtime runs alone; ``then`` runs once it has trained; ``followed_by`` is the next
        phase, trained once every device has finished this one."""
        ctx = self.ctx
        return TrainingJob(ctx.model if model is None else model,
                           ctx.x_train if x is None else x, ctx.y_train if y is None else y,
                           ctx.training, ctx.torch_generator, epochs=epochs, extra_loss=extra_loss,
                           trainable=None if trainable is None else tuple(trainable),
                           model_generator=ctx.model_rng, then=then, followed_by=followed_by,
                           gradient_masks=gradient_masks)

    def drop_stale(self, now: float, max_age_s: float | None) -> list[Hashable]:
        """Forget cached payloads older than ``max_age_s`` (a TTL); returns the keys dropped."""
        if max_age_s is None:
            return []
        stale = [k for k, r in self.cache.items() if r.age(now) > max_age_s]
        for key in stale:
            del self.cache[key]
        return stale

    # -- what the runtime calls ----------------------------------------------------------------
    def receive(self, item: Received) -> None:
        """A peer's payload past the intake's checks: ``check`` it (ArtifactError refuses it),
        then keep it if it is the newest from that peer (and part)."""
        item.parsed = self.check(item.payload)
        key = _cache_key(item)
        old = self.cache.get(key)
        if old is None or (item.round, item.sent_at) >= (old.round, old.sent_at):
            self.cache[key] = item

    def forget_fused(self, fused: Sequence[Received]) -> None:
        """After a fusion of a method that ``reads_fresh_only``: each of the ``fused`` payloads
        still in the cache is replaced by its spent copy (its arrays freed with the message)."""
        for item in fused:
            key = _cache_key(item)
            if self.cache.get(key) is item:
                self.cache[key] = item.spent_copy()

    def has_new(self) -> bool:
        """Whether a payload arrived that no fusion has been given yet."""
        return any(r.fresh for r in self.cache.values())

    def take_fresh(self) -> list[Received]:
        """Cached payloads no fusion has been given yet, marked used, in peer order."""
        fresh = [self.cache[s] for s in sorted(self.cache, key=_peer_order) if self.cache[s].fresh]
        for item in fresh:
            item.fresh = False
        return fresh


def _declared_options(cls: type) -> type[Options] | None:
    """The options type ``cls`` gives a generic method class it derives from (``Algorithm[X]``,
    ``GossipAvg[X]``); for a parameter left a type variable, that variable's default."""
    for base in cls.__dict__.get("__orig_bases__", ()):
        origin = get_origin(base)
        if not (isinstance(origin, type) and issubclass(origin, Algorithm)):
            continue
        declared = get_args(base)[0]
        declared = getattr(declared, "__default__", None) if isinstance(declared, TypeVar) else declared
        if isinstance(declared, type) and issubclass(declared, Options):
            return declared
    return None


def _cache_key(item: Received) -> Hashable:
    """Where a payload is cached: under its sender, or (sender, part) for a share sent in parts."""
    part = item.payload.meta.get("part", "whole")
    return item.sender if part == "whole" else (item.sender, part)


def _peer_order(key: Hashable) -> tuple[Any, ...]:
    """Cache keys in peer order: a peer id, or (peer id, part name)."""
    return key if isinstance(key, tuple) else (key, "")


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
