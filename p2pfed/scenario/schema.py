"""The scenario schema: every key a scenario file may hold, its type, default and limits.

Validated with pydantic before anything runs. Unknown keys are errors (a typo must not be
silently ignored), and no number may be NaN or infinite (``null`` is how a file says "none" where
a field allows it): an infinite latency or learning rate would run to the end and report
results that look complete. Every field is documented in ``scenarios/REFERENCE.md``; keep them
in step (a test checks that every field here appears there).

What a field's range does not bound on its own (how much memory a run needs) is checked by
:mod:`p2pfed.scenario.budget` before anything is allocated.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from p2pfed.energy.profiles import PROFILES, unknown_class


STRICT = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
MAX_SEED = 2**32 - 1          # numpy and torch both take it; larger seeds overflow torch's
MAX_TORCH_THREADS = 256       # more threads than any machine here has cores fail to start
MAX_MESSAGE_BYTES = 2**31     # 2 GiB: what one ZeroMQ frame and the codec's buffers can hold


class Section(BaseModel):
    """Every scenario section: unknown keys and non-finite numbers are errors."""

    model_config = STRICT




class SyntheticSection(Section):
    num_devices: int = Field(default=12, ge=2)
    num_classes: int = Field(default=4, ge=2)
    num_features: int = Field(default=16, ge=1)
    groups_per_class: int = Field(default=3, ge=1)
    samples_per_class: int = Field(default=40, ge=2)
    classes_per_device: int | None = Field(default=None, ge=1)
    separation: float = Field(default=4.0, gt=0)
    noise: float = Field(default=1.0, gt=0)
    shared_groups: bool = False   # one latent group per device for all its classes (user types)

    @model_validator(mode="after")
    def _classes_fit(self) -> SyntheticSection:
        if self.classes_per_device is not None and self.classes_per_device > self.num_classes:
            raise ValueError(f"dataset.synthetic.classes_per_device must not exceed num_classes "
                             f"({self.num_classes}), got {self.classes_per_device}")
        return self


class PartitionSection(Section):
    """How a central dataset is split across devices (``files`` and ``digits``)."""

    kind: Literal["natural", "iid", "dirichlet", "shards", "quantity"] = "natural"
    num_devices: int = Field(default=10, ge=2)
    alpha: float = Field(default=0.5, gt=0)
    classes_per_device: int = Field(default=2, ge=1)
    size_sigma: float = Field(default=1.0, gt=0)
    min_samples: int = Field(default=10, ge=2)


class DatasetSection(Section):
    name: Literal["wisdm", "wisdm-raw", "synthetic", "digits", "files"] = "wisdm"
    path: str | None = None
    test_fraction: float = Field(default=0.2, gt=0, lt=1)
    # Share of each class's training examples a device keeps (the test set is unchanged): how
    # much collaboration helps when devices hold less data.
    train_fraction: float = Field(default=1.0, gt=0, le=1)
    scaling: Literal["device", "federation", "none"] = "device"
    users: list[int] | None = None
    features: list[str] | None = Field(default=None, min_length=1)   # wisdm: the columns kept
    synthetic: SyntheticSection = SyntheticSection()
    device_column: str = Field(default="device", min_length=1)
    label_column: str = Field(default="label", min_length=1)
    class_names: list[str] | None = Field(default=None, min_length=2)
    partition: PartitionSection = PartitionSection()

    @model_validator(mode="after")
    def _path_when_needed(self) -> DatasetSection:
        if self.name in ("wisdm-raw", "files") and self.path is None:
            raise ValueError(f"dataset.path is required for dataset {self.name!r}")
        if self.name == "digits" and self.partition.kind == "natural":
            raise ValueError("dataset.partition.kind: digits has no devices of its own; "
                             "choose iid, dirichlet, shards or quantity")
        if self.name not in ("digits", "files") and self.partition.kind != "natural":
            raise ValueError(f"dataset.partition.kind: only 'natural' for dataset {self.name!r} "
                             f"(partitioners split 'digits' or 'files')")
        if self.device_column == self.label_column:
            raise ValueError("dataset.label_column must differ from dataset.device_column")
        if self.class_names is not None and len(set(self.class_names)) != len(self.class_names):
            raise ValueError("dataset.class_names must not repeat a name")
        if self.features is not None and self.name != "wisdm":
            raise ValueError(f"dataset.features chooses columns of the WISDM transformed file; "
                             f"dataset {self.name!r} uses all its features")
        if self.features is not None and len(set(self.features)) != len(self.features):
            raise ValueError("dataset.features must not repeat a name")
        return self


class ModelSection(Section):
    # "mlp", or a factory of the user's own: "package.module:make_model" / "path/to/file.py:make_model"
    name: str = Field(default="mlp", min_length=1)
    hidden: list[int] = Field(default_factory=lambda: [128, 512], min_length=1)
    unit_gates: bool = False   # a scaling factor on every hidden unit (SAFL adds them itself)
    options: dict[str, Any] = Field(default_factory=dict)   # keyword arguments of a user's factory

    @model_validator(mode="after")
    def _positive(self) -> ModelSection:
        if any(h <= 0 for h in self.hidden):
            raise ValueError(f"model.hidden sizes must be positive, got {self.hidden}")
        if self.name == "mlp" and self.options:
            raise ValueError("model.options are the keyword arguments of a factory of your own; the mlp takes "
                             "model.hidden and model.unit_gates")
        if self.name != "mlp":
            default = ModelSection()
            for key in ("hidden", "unit_gates"):
                if getattr(self, key) != getattr(default, key):
                    raise ValueError(f"model.{key} shapes the mlp; {self.name!r} is built by its own factory "
                                     "(pass its settings in model.options)")
        return self

    @property
    def mlp_layers(self) -> int | None:
        """The MLP's number of Linear layers; None for a model of the user's own."""
        return len(self.hidden) + 1 if self.name == "mlp" else None


class TrainingSection(Section):
    epochs: int = Field(default=1, ge=1)
    batch_size: int = Field(default=32, ge=1)
    lr: float = Field(default=0.05, gt=0)
    momentum: float = Field(default=0.0, ge=0, lt=1)
    weight_decay: float = Field(default=0.0, ge=0)


class AlgorithmSection(BaseModel):
    """``name`` plus the method's own keys, checked against that method's options later."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    name: str = "fedsub"

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class TopologySection(Section):
    kind: Literal["complete", "ring", "erdos-renyi", "small-world", "random-regular", "file"] = "small-world"
    k: int = Field(default=4, ge=2)
    p: float = Field(default=0.1, ge=0, le=1)
    degree: int = Field(default=3, ge=1)
    file: str | None = None
    bandwidth_bps: float = Field(default=1e6, gt=0)
    latency_s: float = Field(default=0.05, ge=0)
    allow_disconnected: bool = False   # a topology file whose nodes do not all reach each other
    # Round trips a link's connection takes to open before its first byte can leave (TCP, ZeroMQ's
    # greeting and handshake, CURVE's): real peers pay them once per link, the simulator at 0 never.
    setup_round_trips: float = Field(default=0.0, ge=0)
    # A message occupies its link for its bytes on the wire (ZeroMQ/CurveZMQ framing, TCP/IPv4
    # headers per segment: device.contact_protocol.wire_bytes), not its encoded bytes alone.
    framing: bool = False
    # A message leaves in flights of TCP's congestion window, restarted after its link was idle
    # (Reno's and CUBIC's slow-start restart: network/slow_start.py), not at the link's rate at once.
    slow_start: bool = False

    @model_validator(mode="after")
    def _file_when_needed(self) -> TopologySection:
        if self.kind == "file" and self.file is None:
            raise ValueError("topology.file is required when topology.kind is 'file'")
        return self


class EngineSection(Section):
    round_period_s: float = Field(default=30.0, gt=0)
    participation: float = Field(default=1.0, gt=0, le=1)
    max_message_bytes: int = Field(default=64 * 2**20, ge=1024, le=MAX_MESSAGE_BYTES)
    # Every method's float tensors on the wire (p2pfed/transport/precision.py): one setting for
    # all, so bytes compare at equal precision; receivers restore them before the method sees them.
    precision: Literal["float32", "float16", "int8"] = "float32"
    # "auto": every core in a simulation, one per real peer or sweep worker (scenario/threads.py)
    torch_threads: int | Literal["auto"] = "auto"
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    max_memory_gib: float | None = Field(default=None, gt=0)
    # A synchronous round trains the devices whose methods train plainly as one batched
    # computation (equal to one at a time to float rounding); false: one model at a time.
    batched_training: bool = True
    # Work methods offload (FedSub's K sweeps) computed ahead by one helper process (a second
    # core) in a contact run with batch windows; "auto": when the machine has two cores or more
    # and this is not a sweep worker.
    offload: bool | Literal["auto"] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "sweep_helper" in data:
            raise ValueError("engine.sweep_helper: renamed engine.offload (the helper process now serves any "
                             "method's offloaded work)")
        return data

    @field_validator("torch_threads")
    @classmethod
    def _thread_count(cls, v: int | Literal["auto"]) -> int | Literal["auto"]:
        if v != "auto" and not 1 <= v <= MAX_TORCH_THREADS:
            raise ValueError(f"must be 'auto' or a number of threads in 1..{MAX_TORCH_THREADS}")
        return v


class DynamicSection(Section):
    """Training classes hidden at the start and returned one at a time (journal Sec. 4.5)."""

    devices_fraction: float = Field(default=0.0, ge=0, le=1)
    max_removed_fraction: float = Field(default=0.8, ge=0, lt=1)
    return_every: int = Field(default=50, ge=1)
    # "visible": a hidden class is out of the test set too and returns to both (the papers);
    # "all": every class stays in the test set throughout.
    test_classes: Literal["visible", "all"] = "visible"


class EvaluationSection(Section):
    every: int = Field(default=1, ge=1)
    every_s: float | None = Field(default=None, gt=0)
    generalization: bool = False   # also score each device on the other devices' pooled test data
    # Round runtimes: the headline F1 scores the model right after the fusion (the FedSub papers'
    # protocol) or after training; with ``both`` the other point is scored too (rounds.csv,
    # devices.csv, summary.json), since the two can rank methods differently.
    when: Literal["after-fusion", "after-training"] = "after-fusion"
    both: bool = True


class ContactsSection(Section):
    """Time-varying contacts; ``none`` keeps synchronous rounds over ``topology``."""

    kind: Literal["none", "static", "random-waypoint", "poisson", "trace"] = "none"
    duration_s: float | None = Field(default=None, gt=0)
    bandwidth_bps: float = Field(default=1e6, gt=0)
    latency_s: float = Field(default=0.05, ge=0)
    loss_rate: float = Field(default=0.0, ge=0, lt=1)
    area_m: list[float] = Field(default_factory=lambda: [1000.0, 1000.0], min_length=2, max_length=2)
    speed_mps: list[float] = Field(default_factory=lambda: [0.5, 1.5], min_length=2, max_length=2)
    pause_s: list[float] = Field(default_factory=lambda: [0.0, 120.0], min_length=2, max_length=2)
    range_m: float = Field(default=50.0, ge=0)
    step_s: float = Field(default=1.0, gt=0)
    mean_intercontact_s: float = Field(default=1800.0, gt=0)
    mean_duration_s: float = Field(default=60.0, gt=0)
    intercontact: Literal["exponential", "power-law"] = "exponential"
    power_law_alpha: float = Field(default=1.5, gt=1)
    file: str | None = None
    format: Literal["one", "interval", "sociopatterns"] | None = None
    window_s: float = Field(default=20.0, gt=0)
    start_s: float | None = Field(default=None, ge=0)
    nodes: Literal["sorted", "most-active"] | list[int | str] = "sorted"
    allow_node_mismatch: bool = False
    allow_no_contacts: bool = False   # a trace none of whose contacts is between two of the devices
    # ideal: a peer's summary vector read directly, a transfer done when its last byte arrives;
    # acknowledged: real peers' summary vectors, acknowledgements and framing (engine.contact_lines)
    protocol: Literal["ideal", "acknowledged"] = "ideal"

    @model_validator(mode="after")
    def _trace_needs_file(self) -> ContactsSection:
        for key in ("file", "format"):
            if self.kind == "trace" and getattr(self, key) is None:
                raise ValueError(f"contacts.{key} is required when contacts.kind is 'trace'")
        if self.protocol == "acknowledged" and self.loss_rate > 0:
            raise ValueError("contacts.loss_rate drops whole messages, which an acknowledged protocol on TCP "
                             "resends: use one or the other")
        if any(x <= 0 for x in self.area_m):
            raise ValueError(f"contacts.area_m sides must be positive, got {self.area_m}")
        return self

    @field_validator("speed_mps")
    @classmethod
    def _speed_range(cls, v: list[float]) -> list[float]:
        if not 0 < v[0] <= v[1]:
            raise ValueError(f"must be [min, max] with 0 < min <= max, got {v}")
        return v

    @field_validator("pause_s")
    @classmethod
    def _pause_range(cls, v: list[float]) -> list[float]:
        if not 0 <= v[0] <= v[1]:
            raise ValueError(f"must be [min, max] with 0 <= min <= max, got {v}")
        return v


class AsynchronousSection(Section):
    """How devices learn when there are no global rounds (any ``contacts.kind`` but ``none``)."""

    train_period_s: float = Field(default=300.0, gt=0)
    train_jitter_s: float = Field(default=0.0, ge=0)
    send_policy: Literal["smallest-first", "largest-first", "whole"] = "smallest-first"
    max_age_s: float | None = Field(default=None, gt=0)
    batch_window_s: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _jitter_below_period(self) -> AsynchronousSection:
        if self.train_jitter_s >= self.train_period_s:
            raise ValueError("asynchronous.train_jitter_s must be below asynchronous.train_period_s")
        if self.batch_window_s >= self.train_period_s - self.train_jitter_s:
            raise ValueError("asynchronous.batch_window_s must be below asynchronous.train_period_s minus "
                             "asynchronous.train_jitter_s (a device's step finishes before its next starts)")
        return self


class ForwardingSection(Section):
    """Store-carry-forward: devices carry peers' artifacts to devices they meet later."""

    enabled: bool = False
    parts: list[str] = Field(default_factory=lambda: ["prototypes"], min_length=1)
    hop_limit: int = Field(default=3, ge=2)
    buffer_items: int = Field(default=64, ge=1)


class ChurnSection(Section):
    """Devices go offline and come back; exponential on/off durations (off when both unset)."""

    mean_online_s: float | None = Field(default=None, gt=0)
    mean_offline_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _both_or_neither(self) -> ChurnSection:
        if (self.mean_online_s is None) != (self.mean_offline_s is None):
            given, missing = (("mean_online_s", "mean_offline_s") if self.mean_offline_s is None
                              else ("mean_offline_s", "mean_online_s"))
            raise ValueError(f"churn.{missing} is required when churn.{given} is set (they go together)")
        return self


AttackKind = Literal["label-flip", "sign-flip", "scale", "noise", "prototype-shift", "subnetwork-poison", "free-ride",
                     "sybil"]


class AdversarySection(Section):
    """Devices that lie: which, how and from when. The attack wraps the device's method
    (``p2pfed/algorithms/attacks.py``), the same in every runtime; a list of kinds combines them."""

    kind: AttackKind | list[AttackKind]
    devices: list[int] | None = Field(default=None, description="these device ids")
    fraction: float | None = Field(default=None, gt=0, lt=1, description="or this fraction, drawn from the seed")
    start_round: int = Field(default=0, ge=0, description="model attacks and free-riding from this round")
    factor: float = Field(default=1.0, gt=0, description="sign-flip: shares -factor x its model; scale: factor x")
    noise_std: float = Field(default=1.0, gt=0, description="noise: Gaussian added to every shared float")
    source_class: int | None = Field(default=None, ge=0, description="label-flip: only this class ...")
    target_class: int | None = Field(default=None, ge=0, description="... relabelled as this one; "
                                     "subnetwork-poison: the class poisoned; prototype-shift toward: class")
    shift: float = Field(default=1.0, gt=0, description="prototype-shift: the share of the way moved")
    toward: Literal["peers", "device", "class"] = Field(
        default="peers", description="prototype-shift: the peers' mean prototype of each class, the victim's, "
                                     "or target_class's")
    victim: int | None = Field(default=None, ge=0, description="prototype-shift toward device: whose prototypes")
    identities: int = Field(default=3, ge=1, description="sybil: other devices' ids it also sends its share under")

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.kind) if isinstance(self.kind, list) else (self.kind,)

    @model_validator(mode="after")
    def _one_way_to_choose(self) -> AdversarySection:
        kinds = self.kinds
        if not kinds or len(set(kinds)) != len(kinds):
            raise ValueError(f"adversaries: kind must name distinct attacks, got {self.kind}")
        if (self.devices is None) == (self.fraction is None):
            raise ValueError("adversaries: give devices (a list of ids) or fraction, not both or neither")
        if self.source_class is not None and "label-flip" not in kinds:
            raise ValueError(f"adversaries: source_class is label-flip's, not {'+'.join(kinds)}'s")
        if "label-flip" in kinds and (self.source_class is None) != (self.target_class is None):
            raise ValueError("adversaries: source_class and target_class go together (label-flip of one class)")
        needs_target = "subnetwork-poison" in kinds or ("prototype-shift" in kinds and self.toward == "class")
        if needs_target and self.target_class is None:
            raise ValueError("adversaries: target_class is required by subnetwork-poison and by "
                             "prototype-shift toward class")
        if ("prototype-shift" in kinds and self.toward == "device") != (self.victim is not None):
            raise ValueError("adversaries: victim goes with prototype-shift toward device, and only with it")
        if self.target_class is not None and not needs_target and "label-flip" not in kinds:
            raise ValueError(f"adversaries: target_class means nothing to {'+'.join(kinds)}")
        return self


class ProfileEntry(Section):
    """One device class of ``devices.profiles`` and the share of the devices it gets."""

    name: str = Field(min_length=1, description="a named class (PROFILES), or your own label")
    fraction: float = Field(gt=0, le=1, description="share of the devices, drawn from the seed")
    flops_per_s: float | None = Field(default=None, gt=0, description="training throughput")
    joules_per_flop: float | None = Field(default=None, ge=0, description="compute energy")
    battery_j: float | None = Field(default=None, gt=0, description="battery capacity (none: unlimited)")

    @model_validator(mode="after")
    def _figures_known(self) -> ProfileEntry:
        if self.name not in PROFILES and (self.flops_per_s is None or self.joules_per_flop is None):
            raise ValueError(f"devices.profiles: {unknown_class(self.name)}")
        return self


class RadioSection(Section):
    """A radio of your own: joules per byte sent and received, watts drawn for up to ``tail_s``
    seconds after a transfer (its tail), and watts while it listens (idle)."""

    send_j_per_byte: float = Field(ge=0)
    receive_j_per_byte: float = Field(ge=0)
    tail_w: float = Field(default=0.0, ge=0)
    tail_s: float = Field(default=0.0, ge=0)
    idle_w: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _tail_whole(self) -> RadioSection:
        if (self.tail_w > 0) != (self.tail_s > 0):
            raise ValueError("devices.radio: a tail needs both tail_w (W) and tail_s (s)")
        return self


class DevicesSection(Section):
    """Devices as they are: compute speed and energy per device class, a radio, and
    batteries. Absent (the default), none of it runs and results are as before."""

    profiles: list[ProfileEntry] = []
    file: str | None = None          # per-device figures instead of profiles (CSV or YAML)
    radio: Literal["wifi", "ble", "lte"] | RadioSection | None = None
    battery_j: float | None = Field(default=None, gt=0)   # every device's capacity unless its class gives one
    recharge_every_s: float | None = Field(default=None, gt=0)
    recharge_at_s: float | None = Field(default=None, ge=0)   # the first recharge (default: recharge_every_s)

    @model_validator(mode="after")
    def _consistent(self) -> DevicesSection:
        if self.profiles and self.file is not None:
            raise ValueError("devices: give profiles (classes by fraction) or file (per-device figures), not both")
        if self.profiles and abs(sum(p.fraction for p in self.profiles) - 1.0) > 1e-6:
            raise ValueError(f"devices.profiles: the fractions must sum to 1, got "
                             f"{sum(p.fraction for p in self.profiles):g}")
        if len({p.name for p in self.profiles}) != len(self.profiles):
            raise ValueError("devices.profiles: each class once (names repeat)")
        if self.recharge_at_s is not None and self.recharge_every_s is None:
            raise ValueError("devices.recharge_at_s needs devices.recharge_every_s")
        if self.recharge_every_s is not None and self.battery_j is None and self.file is None \
                and not any(p.battery_j is not None for p in self.profiles):
            raise ValueError("devices.recharge_every_s: no device has a battery (set devices.battery_j)")
        return self

    def opted_in(self) -> bool:
        return self != DevicesSection()


class Scenario(Section):
    name: str = "scenario"
    description: str = ""
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    rounds: int = Field(default=20, ge=1)
    dataset: DatasetSection = DatasetSection()
    model: ModelSection = ModelSection()
    training: TrainingSection = TrainingSection()
    algorithm: AlgorithmSection = AlgorithmSection()
    topology: TopologySection = TopologySection()
    engine: EngineSection = EngineSection()
    evaluation: EvaluationSection = EvaluationSection()
    dynamic: DynamicSection = DynamicSection()
    contacts: ContactsSection = ContactsSection()
    asynchronous: AsynchronousSection = AsynchronousSection()
    forwarding: ForwardingSection = ForwardingSection()
    churn: ChurnSection = ChurnSection()
    adversaries: list[AdversarySection] = []
    devices: DevicesSection = DevicesSection()

    @model_validator(mode="after")
    def _sections_agree(self) -> Scenario:
        """Rules that span sections (each still names the field to change)."""
        if self.dynamic.devices_fraction > 0 and self.contacts.kind != "none":
            raise ValueError("dynamic.devices_fraction: dynamic data returns classes on a round schedule, "
                             f"so it needs synchronous rounds (contacts.kind: none, got {self.contacts.kind!r})")
        for i, adversary in enumerate(self.adversaries):
            if "sybil" in adversary.kinds and not self.forwarding.enabled:
                raise ValueError(f"adversaries.{i}.kind: sybil sends its share under other devices' ids as carried "
                                 "copies, which receivers accept only with forwarding.enabled: true (contacts)")
        if self.topology.framing and self.contacts.kind != "none":
            raise ValueError("topology.framing: times the messages of synchronous rounds' static links; over "
                             "contacts use contacts.protocol: acknowledged (framing, summary vectors, "
                             "acknowledgements)")
        if self.topology.slow_start and self.contacts.kind != "none":
            raise ValueError("topology.slow_start: times the messages of synchronous rounds' static links; the "
                             f"contact runtime (contacts.kind: {self.contacts.kind!r}) does not use it")
        if self.topology.setup_round_trips > 0 and self.contacts.kind != "none":
            raise ValueError("topology.setup_round_trips: models the connections of synchronous rounds' static "
                             f"links; the contact runtime (contacts.kind: {self.contacts.kind!r}) does not use it")
        if self.engine.offload is True and not self.uses_batch_windows():
            raise ValueError("engine.offload: true: the helper process computes offloaded work of a contact run's "
                             "batch windows ahead, so it needs contacts (contacts.kind other than none) and "
                             "asynchronous.batch_window_s > 0; use auto or false")
        return self

    def uses_batch_windows(self) -> bool:
        """A contact run whose steps finish together at the ends of batch windows."""
        return self.contacts.kind != "none" and self.asynchronous.batch_window_s > 0

    def device_rounds(self) -> int:
        """Rounds a device runs: the scenario's, or with contacts the trainings expected in
        ``contacts.duration_s`` (methods with a final local phase need to know the end)."""
        if self.contacts.kind == "none" or self.contacts.duration_s is None:
            return self.rounds
        return max(1, math.ceil(self.contacts.duration_s / self.asynchronous.train_period_s))
