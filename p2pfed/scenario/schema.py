"""The scenario schema: every key a scenario file may hold, its type, default and limits.

Validated with pydantic before anything runs. Unknown keys are errors (a typo must not be
silently ignored), and no number may be NaN or infinite (``null`` is how a file says "none" where
a field allows it): an infinite latency or learning rate would run to the end and report
results that look complete. Every field carries its ``description``, the one text the reference page
(``docs/reference/scenario.md``, generated) and ``p2pfed explain`` show; a test refuses a field without one.

What a field's range does not bound on its own (how much memory a run needs) is checked by
:mod:`p2pfed.scenario.budget` before anything is allocated.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, get_args

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
    num_devices: int = Field(default=12, ge=2, description="Devices generated.")
    num_classes: int = Field(default=4, ge=2, description="Classes.")
    num_features: int = Field(default=16, ge=1, description="Features per sample.")
    groups_per_class: int = Field(default=3, ge=1, description=(
        "Latent groups per class: the devices of a group share that class's distribution, and the grouping differs "
        "per class (unless `shared_groups`)."))
    samples_per_class: int = Field(default=40, ge=2, description="Samples per device and class.")
    classes_per_device: int | None = Field(default=None, ge=1, description=(
        "Each device holds this many random classes (at most `num_classes`); null: every class."))
    separation: float = Field(default=4.0, gt=0, description="Distance scale between the group means.")
    noise: float = Field(default=1.0, gt=0, description="Standard deviation within a group.")
    shared_groups: bool = Field(default=False, description=(
        "One latent group per device for all its classes (user types: the same devices are alike in every class), "
        "instead of one grouping per class."))

    @model_validator(mode="after")
    def _classes_fit(self) -> SyntheticSection:
        if self.classes_per_device is not None and self.classes_per_device > self.num_classes:
            raise ValueError(f"dataset.synthetic.classes_per_device must not exceed num_classes "
                             f"({self.num_classes}), got {self.classes_per_device}")
        return self


class PartitionSection(Section):
    """How a central dataset is split across devices (``files`` and ``digits``)."""

    kind: Literal["natural", "iid", "dirichlet", "shards", "quantity"] = Field(default="natural", description=(
        "How samples become devices. `natural`: the data's own devices (`device_column`, or one `.npz` file per "
        "device; the only kind for `wisdm`, `wisdm-raw` and `synthetic`, refused for `digits`). The others pool every"
        " sample and draw `num_devices` devices from the scenario's seed: `iid`, equal random parts; `dirichlet`, "
        "label skew (`alpha`); `shards`, exactly `classes_per_device` classes per device; `quantity`, IID labels with"
        " skewed device sizes (`size_sigma`)."))
    num_devices: int = Field(default=10, ge=2, description="Devices drawn (every kind but `natural`).")
    alpha: float = Field(default=0.5, gt=0, description=(
        "`dirichlet`: the concentration of the Dirichlet(alpha, ..., alpha) proportions that spread each class over "
        "the devices; small (0.1) puts each class on few devices, large (100) is close to IID. Redrawn (up to 1,000 "
        "times) until every device has `min_samples`."))
    classes_per_device: int = Field(default=2, ge=1, description=(
        "`shards`: classes per device, dealt round-robin in a random order, each class's samples split evenly among "
        "its devices (at most the class count; `num_devices` times it must cover every class)."))
    size_sigma: float = Field(default=1.0, gt=0, description=(
        "`quantity`: standard deviation of the log device sizes; each device gets `min_samples` plus a share "
        "proportional to a lognormal(0, size_sigma) draw."))
    min_samples: int = Field(default=10, ge=2, description=(
        "Fewest samples (train and test together) a drawn device may get; a partition that cannot give it is an "
        "error."))


class DatasetSection(Section):
    name: Literal["wisdm", "wisdm-raw", "synthetic", "digits", "files"] = Field(default="wisdm", description=(
        "`wisdm`: the packaged WISDM v1.1 transformed file, one device per user (36); `wisdm-raw`: a raw 20 Hz WISDM "
        "file you supply (`path`), windowed as FedSub does (1 s windows, mean of 3 axes); `synthetic`: generated data"
        " with planted per-class groups (`synthetic`); `digits`: scikit-learn's bundled handwritten digits (8x8 "
        "images, 10 classes), split into devices by `partition`; `files`: your own data (`path`)."))
    path: str | None = Field(default=None, description=(
        "`wisdm`: an alternative ARFF or npz file (null: the packaged one); `wisdm-raw`: the raw file (required); "
        "`files`: one `.csv`, `.parquet` or `.npz` file, or a folder of per-device `.npz` files (required). Relative "
        "to the scenario file's folder."))
    test_fraction: float = Field(default=0.2, gt=0, lt=1, description=(
        "Share of each device's data held out as its test split, stratified by class (the FedSub papers use 0.3)."))
    train_fraction: float = Field(default=1.0, gt=0, le=1, description=(
        "Share of each class's training examples a device keeps (at least one per class), drawn after the test split:"
        " the test set and the classes a device holds stay the same at every fraction, so it shows how much "
        "collaboration helps when devices hold less data. 1: all of them. A real peer's own `data.path` file is used "
        "whole."))
    scaling: Literal["device", "federation", "none"] = Field(default="device", description=(
        "Feature standardisation. `device`: each device with its own training statistics (no test leakage); "
        "`federation`: every device with the mean and variance of all devices' training splits pooled, a federated "
        "mean and variance that test splits never enter; `none`: features as they are. Missing values are imputed "
        "with the device's own training mean under every option. Unused by `synthetic`."))
    users: list[int] | None = Field(default=None, description=(
        "WISDM user ids to keep, one device each, in ascending id order; null: every user."))
    features: list[str] | None = Field(default=None, min_length=1, description=(
        "`wisdm`: the feature columns kept, in this order, by their names in the file (`[XAVG, YAVG, ZAVG]` gives the"
        " FedSub journal's 3 inputs); an unknown name is an error listing the file's names. null: every column."))
    synthetic: SyntheticSection = Field(default=SyntheticSection(), description="How `synthetic` data is generated.")
    device_column: str = Field(default="device", min_length=1, description=(
        "`files`: the column (or `.npz` array) naming each sample's device; needed only with `partition.kind: "
        "natural`, and never a feature."))
    label_column: str = Field(default="label", min_length=1, description=(
        "`files`: the column (or `.npz` array) holding each sample's label."))
    class_names: list[str] | None = Field(default=None, min_length=2, description=(
        "`files`: fixes the label space: integer labels are ids into this list, string labels must be among its "
        "names, and a class no device holds still counts. null: the distinct labels found, sorted, become classes "
        "0..C-1."))
    partition: PartitionSection = Field(default=PartitionSection(), description=(
        "How `digits` or `files` data is split into devices."))

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
    name: str = Field(default="mlp", min_length=1, description=(
        "The model every device trains: `mlp`, a ReLU MLP (the FedSub journal's model); `cnn`, a small CNN with batch"
        " norm; a factory of your own, `package.module:make_model` or `path/to/file.py:make_model` (relative to the "
        "scenario's folder, then the working directory), called as `make_model(input_size, num_classes, generator, "
        "**model.options)` and returning a `torch.nn.Module` that maps (batch, input_size) to (batch, num_classes) "
        "logits; or a name an installed package registers in the `p2pfed.models` entry-point group."))
    hidden: list[int] = Field(default_factory=lambda: [128, 512], min_length=1, description=(
        "`mlp`: the hidden layer sizes; the last one is the prototype dimension."))
    unit_gates: bool = Field(default=False, description=(
        "`mlp`: a learnable scaling factor, starting at 1, on every hidden unit's ReLU output (the per-unit factors "
        "Network Slimming ranks). SAFL adds them whatever this says; other methods treat them as ordinary parameters."))
    options: dict[str, Any] = Field(default_factory=dict, description=(
        "Keyword arguments of your own factory or of `cnn` (`shape`, `channels`, `kernel`, `batch_norm`); refused "
        "with `mlp`."))

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
    epochs: int = Field(default=1, ge=1, description="Local epochs per round (E).")
    batch_size: int = Field(default=32, ge=1, description="Mini-batch size.")
    lr: float = Field(default=0.05, gt=0, description="Learning rate (SGD's, or Adam's with `optimizer: adam`).")
    momentum: float = Field(default=0.0, ge=0, lt=1, description=(
        "SGD momentum, its buffer reset every round; 0: plain SGD. Not with `optimizer: adam`."))
    weight_decay: float = Field(default=0.0, ge=0, description="L2 penalty (SGD's or Adam's weight decay); 0: none.")
    optimizer: Literal["sgd", "adam"] = Field(default="sgd", description=(
        "The local optimiser: `sgd`, or `adam` (torch's Adam with its default betas, its moments starting afresh every "
        "round as SGD's momentum does; FedAli's paper trains every method so, Sec. 5.1). Adam's training runs one "
        "device at a time (no batched training)."))

    @model_validator(mode="after")
    def _momentum_is_sgds(self) -> TrainingSection:
        if self.optimizer == "adam" and self.momentum != 0:
            raise ValueError("training.momentum: SGD's momentum; with optimizer: adam leave it at 0 (Adam keeps "
                             "its own moments)")
        return self


class AlgorithmSection(BaseModel):
    """``name`` plus the method's own keys, checked against that method's options later."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    name: Annotated[str, Field(description=(
        "The method: a shipped one (its options: `p2pfed explain algorithm.METHOD`); a class of your own, "
        "`path/to/file.py:MyMethod` "
        "(relative to the scenario's folder, then the working directory) or `package.module:MyMethod`; or a name an "
        "installed package registers in the `p2pfed.algorithms` entry-point group. Swapping it (`--algorithm`, `--set"
        " algorithm.name=NAME`) keeps the options the new method knows."))] = "fedsub"

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class TopologySection(Section):
    kind: Literal["complete", "ring", "erdos-renyi", "small-world", "random-regular", "file"] = Field(
        default="small-world", description=(
            "The static graph: `complete`; `ring`; `erdos-renyi` (edge probability `p`); `small-world` "
            "(Watts-Strogatz, `k` and `p`); `random-regular` (`degree`); or `file`. Random kinds are redrawn from the"
            " seed until connected."))
    k: int = Field(default=4, ge=2, description="`small-world`: each node's ring neighbours.")
    p: float = Field(default=0.1, ge=0, le=1, description=(
        "`small-world`: the rewiring probability; `erdos-renyi`: the edge probability."))
    degree: int = Field(default=3, ge=1, description="`random-regular`: every node's degree.")
    file: str | None = Field(default=None, description=(
        "`file`: an edge list (`a b` or `a b bandwidth_bps latency_s` per line, `#` comments) or GraphML. Node ids "
        "map to devices in sorted order (numeric ids numerically) and the node count must equal the device count; a "
        "bad line is reported as `file:line`."))
    bandwidth_bps: float = Field(default=1e6, gt=0, description=(
        "Link bandwidth in bit/s (a file's per-edge value wins)."))
    latency_s: float = Field(default=0.05, ge=0, description=(
        "Link latency in seconds: a message of B bytes arrives `latency_s + 8B / bandwidth_bps` after it starts, and "
        "transfers on one link direction queue."))
    allow_disconnected: bool = Field(default=False, description=(
        "Run a topology file whose graph leaves some nodes with no path to the others (each part then learns on its "
        "own); false: such a file is refused, naming those nodes. Generated kinds are always connected."))
    setup_round_trips: float = Field(default=0.0, ge=0, description=(
        "Round trips (2 × the link's latency) a link's connection takes to open before its first byte can leave, "
        "counted from the run's start, as real peers' TCP, ZeroMQ and CURVE handshakes take once per link. 0: links "
        "are up from the start. Synchronous rounds only."))
    framing: bool = Field(default=False, description=(
        "A message occupies its link for its bytes on the wire (ZeroMQ and CurveZMQ framing, TCP/IPv4 headers per "
        "segment), not its encoded bytes alone; the bytes counted in results stay the encoded ones. Synchronous "
        "rounds only (over contacts, `contacts.protocol: acknowledged` includes it)."))
    slow_start: bool = Field(default=False, description=(
        "A message leaves in flights of TCP's congestion window, restarted after its link was idle (the slow-start "
        "restart of Reno and CUBIC), not at the link's rate at once. Synchronous rounds only."))

    @model_validator(mode="after")
    def _file_when_needed(self) -> TopologySection:
        if self.kind == "file" and self.file is None:
            raise ValueError("topology.file is required when topology.kind is 'file'")
        return self


class EngineSection(Section):
    round_period_s: float = Field(default=30.0, gt=0, description=(
        "Simulated seconds per round; artifacts arriving later are used in the next round."))
    participation: float = Field(default=1.0, gt=0, le=1, description=(
        "Chance that a device trains and shares in a round (inactive devices still fuse and are evaluated); 1: every "
        "device takes part, as real peers must."))
    max_message_bytes: int = Field(default=64 * 2**20, ge=1024, le=MAX_MESSAGE_BYTES, description=(
        "Largest message in bytes (default 64 MiB); larger ones are refused by the codec and the socket."))
    precision: Literal["float32", "float16", "int8"] = Field(default="float32", description=(
        "Every method's float tensors on the wire: `float16` casts them (a tensor beyond float16's range stays "
        "float32); `int8` quantises each tensor affinely between its min and max. Integer and boolean tensors never "
        "change, and receivers restore float32 before the method sees the payload."))
    torch_threads: int | Literal["auto"] = Field(default="auto", description=(
        "PyTorch intra-op threads, 1..256. `auto`: every core in a simulation of synchronous rounds, one in the "
        "contact runtime, one per real peer and one per sweep worker. Results can differ in float rounding between "
        "thread counts (a multi-threaded matrix product may sum in another order), so `auto` on machines with "
        "different cores can too: set a number where runs must agree to the bit."))
    device: Literal["cpu", "cuda", "auto"] = Field(default="cpu", description=(
        "Where training runs. Only `cpu` is built so far: `cuda` is refused with the reason, `auto` picks `cpu`."))
    max_memory_gib: float | None = Field(default=None, gt=0, description=(
        "Memory the simulation may use, in GiB: a run whose estimate (data, models, messages in flight) exceeds it is"
        " refused before the models are built, naming the field to change. null: the memory available when the run "
        "starts."))
    batched_training: bool = Field(default=True, description=(
        "Do the arithmetic of all devices that act at the same instant together: training of plain jobs as one "
        "batched computation per architecture, fusion jobs, evaluation and offloaded work (equal to one device at a "
        "time up to float rounding); false: one device at a time."))
    offload: bool | Literal["auto"] = Field(default="auto", description=(
        "A helper process on a second core computes the work methods offload (FedSub's K sweeps) during a contact "
        "run's batch windows; results are equal with or without it. `auto`: on when the machine has two cores or more"
        " and the run is not a sweep worker; `true` needs contacts and `asynchronous.batch_window_s` > 0."))
    shards: int = Field(default=1, ge=1, le=4096, description=(
        "Split a run of synchronous rounds over this many processes (Dask actors, one per worker), the devices "
        "partitioned by the graph so that most neighbours share one; messages between shards pass through Dask as "
        "their encoded bytes. Results equal one process's. 1: one process. Needs the `sweeps` extra "
        "(`dask[distributed]`); not with contacts or `devices`."))
    scheduler: str | None = Field(default=None, description=(
        "With `shards` > 1: the address of the Dask scheduler whose workers run the shards (`tcp://host:8786`); they "
        "must see the scenario's files at the same paths and run the same p2pfed. null: a local cluster of one "
        "process per shard on this machine."))

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

    devices_fraction: float = Field(default=0.0, ge=0, le=1, description=(
        "Fraction of the devices (rounded) that lose classes before round 1; 0 keeps the data static (the FedSub "
        "journal uses 0.6). Needs synchronous rounds."))
    max_removed_fraction: float = Field(default=0.8, ge=0, lt=1, description=(
        "Each chosen device hides between 1 and floor(this × its classes) of its classes, never all of them."))
    return_every: int = Field(default=50, ge=1, description=(
        "Every N rounds each chosen device gets one hidden class back, in a random order drawn at the start."))
    test_classes: Literal["visible", "all"] = Field(default="visible", description=(
        "`visible`: a hidden class is out of the device's test set too and comes back to its training and test sets "
        "at once (as in the papers); `all`: the test set stays complete throughout."))


class EvaluationSection(Section):
    every: int = Field(default=1, ge=1, description=(
        "Evaluate every N rounds, and always after the last; each device on its own test split."))
    every_s: float | None = Field(default=None, gt=0, description=(
        "With contacts (no rounds): evaluate every device every this many simulated seconds, and at the end. null: "
        "the run's duration / 20."))
    generalization: bool = Field(default=False, description=(
        "Also score each device's model on the other devices' test splits pooled together (generalization, next to "
        "personalization on its own); one more evaluation per device."))
    when: Literal["after-fusion", "after-training"] = Field(default="after-fusion", description=(
        "Synchronous rounds and real peers: where in a device's round the headline evaluation happens, right after "
        "fusing what arrived and before local training (the FedSub papers' protocol), or after local training. Each "
        "method evaluates the model it would use. With contacts a device is scored with the model it holds at each "
        "evaluation instant instead."))
    both: bool = Field(default=True, description=(
        "Synchronous rounds and real peers: also score every device at the other point of its round (after the fusion"
        " and after the training), which can rank methods differently; the headline columns are unchanged. false "
        "halves the evaluation work."))


class ContactsSection(Section):
    """Time-varying contacts; ``none`` keeps synchronous rounds over ``topology``."""

    kind: Literal["none", "static", "random-waypoint", "poisson", "trace"] = Field(default="none", description=(
        "`none`: synchronous rounds over `topology`; `static`: the `topology` graph as contacts that never end, run "
        "asynchronously; `random-waypoint`: mobility in a rectangle; `poisson`: independent pairwise contacts; "
        "`trace`: a contact trace file."))
    duration_s: float | None = Field(default=None, gt=0, description=(
        "Simulated seconds to run (a trace is cut here); null: the trace's span, or 3600 for generated contacts."))
    bandwidth_bps: float = Field(default=1e6, gt=0, description=(
        "Bandwidth of every contact in bit/s; each direction sends one message at a time."))
    latency_s: float = Field(default=0.05, ge=0, description=(
        "Per-message latency in seconds: a message of B bytes needs `8B / bandwidth_bps + latency_s` and is aborted "
        "if the contact ends first."))
    loss_rate: float = Field(default=0.0, ge=0, lt=1, description=(
        "Chance that a fully sent message is lost (its bytes count as wasted); refused with `protocol: acknowledged`,"
        " whose TCP would resend it."))
    area_m: list[float] = Field(default_factory=lambda: [1000.0, 1000.0], min_length=2, max_length=2, description=(
        "`random-waypoint`: the rectangle's [width, height] in metres."))
    speed_mps: list[float] = Field(default_factory=lambda: [0.5, 1.5], min_length=2, max_length=2, description=(
        "`random-waypoint`: [min, max] walking speed in m/s (0 < min <= max), drawn uniformly per leg."))
    pause_s: list[float] = Field(default_factory=lambda: [0.0, 120.0], min_length=2, max_length=2, description=(
        "`random-waypoint`: [min, max] pause at each waypoint in seconds (0 <= min <= max), drawn uniformly."))
    range_m: float = Field(default=50.0, ge=0, description=(
        "`random-waypoint`: radio range in metres; a contact lasts while two devices are strictly closer than this "
        "(0: no contacts)."))
    step_s: float = Field(default=1.0, gt=0, description=(
        "`random-waypoint`: positions are sampled on this step (seconds), and contact times are resolved to it."))
    mean_intercontact_s: float = Field(default=1800.0, gt=0, description=(
        "`poisson`: mean gap in seconds between two contacts of a pair (the rate is its inverse)."))
    mean_duration_s: float = Field(default=60.0, gt=0, description=(
        "`poisson`: mean contact duration in seconds (exponential)."))
    intercontact: Literal["exponential", "power-law"] = Field(default="exponential", description=(
        "`poisson`: the law of the gaps; `power-law` is Pareto with the same mean, heavy-tailed as in human traces."))
    power_law_alpha: float = Field(default=1.5, gt=1, description="`poisson` with `power-law` gaps: the Pareto shape.")
    file: str | None = Field(default=None, description=(
        "`trace`: the trace file (`.gz` allowed), relative to the scenario's folder; a bad line is reported as "
        "`file:line`."))
    format: Literal["one", "interval", "sociopatterns"] | None = Field(default=None, description=(
        "`trace`: `one`, ONE simulator events `<time> CONN <a> <b> up|down`; `interval`, `<a> <b> <start> <end>` per "
        "line; `sociopatterns`, `t i j` per window (runs of windows merged into contacts). `#` comments and blank "
        "lines are allowed."))
    window_s: float = Field(default=20.0, gt=0, description=(
        "`sociopatterns`: the window length in seconds; windows whose ends are exactly this far apart make one "
        "contact `[first - window_s, last]`."))
    start_s: float | None = Field(default=None, ge=0, description=(
        "`trace`: the trace time that becomes simulated time 0 (earlier contacts are dropped); null: the first "
        "contact."))
    nodes: Literal["sorted", "most-active"] | list[int | str] = Field(default="sorted", description=(
        "`trace`: how trace ids become devices: `sorted`, ids in ascending (numeric) order are devices 0, 1, ...; "
        "`most-active`, the N ids in the most contacts (ties by id), in id order; a list: device i is `nodes[i]`."))
    allow_node_mismatch: bool = Field(default=False, description=(
        "`trace`: leave extra ids out and let extra devices meet nobody; false: a trace with fewer ids than devices "
        "(or, for `sorted`, more) is an error."))
    allow_no_contacts: bool = Field(default=False, description=(
        "`trace`: run a trace none of whose contacts is between two of the devices within the run's window (local "
        "training that looks like a federation); false: it is refused, naming the file and the trace ids used as "
        "devices."))
    protocol: Literal["ideal", "acknowledged"] = Field(default="ideal", description=(
        "`ideal`: a device reads its peer's summary vector directly, and a transfer is complete when its last byte "
        "arrives; `acknowledged`: real peers' protocol, with summary vectors sent when a contact opens, one queue per"
        " direction, framing, and a transfer complete when the receiver's acknowledgement is back."))

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

    train_period_s: float = Field(default=300.0, gt=0, description=(
        "Each device trains every this many seconds, first at a random offset within one period; before training it "
        "fuses if its cache holds artifacts it has not used."))
    train_jitter_s: float = Field(default=0.0, ge=0, description=(
        "Each period is drawn uniformly within plus or minus this many seconds (below `train_period_s`)."))
    send_policy: Literal["smallest-first", "largest-first", "whole"] = Field(default="smallest-first", description=(
        "Order of the messages within a contact: the method's parts and carried items, smallest first or largest "
        "first; `whole`: one message per share (the synchronous payload)."))
    max_age_s: float | None = Field(default=None, gt=0, description=(
        "Time to live: cached and carried artifacts older than this many seconds (since their owner made them) are "
        "dropped and never fused; null: no limit."))
    batch_window_s: float = Field(default=0.0, ge=0, description=(
        "0: a device's step (fuse, train, share) happens at the instant it falls due. Above 0: simulated time is cut "
        "into windows of this length; a step starts when it falls due and finishes at the end of its window, together"
        " with every step started in it, so that their fusions and training are batched. Below `train_period_s` minus"
        " `train_jitter_s`."))

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

    enabled: bool = Field(default=False, description=(
        "Carry the parts received from peers and pass them on to the devices met later (store-carry-forward)."))
    parts: list[str] = Field(default_factory=lambda: ["prototypes"], min_length=1, description=(
        "Which parts are carried, by the names the method gives its parts (FedSub: `prototypes`, `subnetworks`; a "
        "method that does not split its share sends `whole`)."))
    hop_limit: int = Field(default=3, ge=2, description=(
        "An artifact is not passed on once it has travelled this many links (1: straight from its owner)."))
    buffer_items: int = Field(default=64, ge=1, description="Carried items per device; the oldest are evicted first.")


class SecuritySection(Section):
    """What binds an artifact to the device that made it."""

    sign_artifacts: bool = Field(default=True, description=(
        "Every device signs each artifact it shares (Ed25519, over its content, round and owner id) and every "
        "receiver checks the signature on arrival and on every carried copy: a copy whose signature is not its "
        "claimed owner's (a Sybil's forgery) is refused and counted in `comm.drop_reasons` as `bad-signature`. The "
        "signature travels in each message and its bytes are counted. Simulated keys derive from `seed` and the "
        "device id. `false`: artifacts are not authenticated (an unauthenticated network, where a carried copy's "
        "origin is taken on trust)."))


class ChurnSection(Section):
    """Devices go offline and come back; exponential on/off durations (off when both unset)."""

    mean_online_s: float | None = Field(default=None, gt=0, description=(
        "Mean time in seconds a device stays online (exponential); null, with `mean_offline_s`: no churn."))
    mean_offline_s: float | None = Field(default=None, gt=0, description=(
        "Mean time in seconds a device stays offline (exponential); set both means or neither."))

    @model_validator(mode="after")
    def _both_or_neither(self) -> ChurnSection:
        if (self.mean_online_s is None) != (self.mean_offline_s is None):
            given, missing = (("mean_online_s", "mean_offline_s") if self.mean_offline_s is None
                              else ("mean_offline_s", "mean_online_s"))
            raise ValueError(f"churn.{missing} is required when churn.{given} is set (they go together)")
        return self


AttackKind = Literal["label-flip", "sign-flip", "scale", "noise", "prototype-shift", "subnetwork-poison", "free-ride",
                     "sybil", "alie", "ipm", "min-max", "min-sum"]
ATTACK_KINDS: tuple[str, ...] = get_args(AttackKind)
AttackName = AttackKind | str   # a shipped kind, or a user's attack (resolved when the scenario loads)


class AdversarySection(Section):
    """Devices that lie: which, how and from when. The attack wraps the device's method
    (``p2pfed/algorithms/attacks.py``), the same in every runtime; a list of kinds combines them."""

    kind: AttackName | list[AttackName] = Field(description=(
        "The attack, or a list of distinct attacks each acting in turn. `label-flip`: trains on labels C - 1 - y (or "
        "only `source_class` as `target_class`); `sign-flip`, `scale`: shares every model float array times -`factor`"
        " or `factor`; `noise`: adds Gaussian noise of `noise_std` to them; `prototype-shift`: moves each shared "
        "prototype `shift` of the way toward the goal `toward` names; `subnetwork-poison`: the rows of "
        "`target_class`'s own units times -`factor` (methods with class subnetworks); `free-ride`: never trains, "
        "fuses and shares what it holds; `sybil`: also sends its share as copies carried for `identities` other "
        "devices (needs `forwarding.enabled`; each such copy is refused while `security.sign_artifacts` is on). "
        "Adaptive, each computed from the liar's own share and its neighbours' newest shares: `alie` sends their "
        "mean minus `z` standard deviations; `ipm`, their mean times -`epsilon`; `min-max` / `min-sum`, their mean "
        "minus the largest multiple of the `deviation` that keeps its largest (summed) squared distance to them "
        "within theirs to each other. Or "
        "an attack of your own: `path/to/file.py:Class` (relative to the scenario's folder), `module:Class`, or an "
        "installed package's `p2pfed.attacks` entry point, a subclass of `p2pfed.algorithms.Attacker`."))
    devices: list[int] | None = Field(default=None, description=(
        "These device ids are adversaries; give this or `fraction`."))
    fraction: float | None = Field(default=None, gt=0, lt=1, description=(
        "Or this share of the devices (rounded, at least one), drawn from the seed among those no earlier entry "
        "chose."))
    start_round: int = Field(default=0, ge=0, description=(
        "Model, prototype and subnetwork attacks and free-riding start at this round (labels are flipped from the "
        "start)."))
    factor: float = Field(default=1.0, gt=0, description=(
        "`sign-flip`, `scale` and `subnetwork-poison`: the factor applied."))
    noise_std: float = Field(default=1.0, gt=0, description=(
        "`noise`: the standard deviation of the Gaussian noise added to every shared float."))
    source_class: int | None = Field(default=None, ge=0, description=(
        "`label-flip`: only this class is relabelled, as `target_class` (both or neither); null: every class."))
    target_class: int | None = Field(default=None, ge=0, description=(
        "`label-flip` of one class: the new label; `subnetwork-poison`: the class poisoned (required); "
        "`prototype-shift` with `toward: class`: the class moved toward."))
    shift: float = Field(default=1.0, gt=0, description=(
        "`prototype-shift`: the share of the way moved (1: onto the goal)."))
    toward: Literal["peers", "device", "class"] = Field(default="peers", description=(
        "`prototype-shift`'s goal for each class: `peers`, the mean of the prototypes its peers sent; `device`, the "
        "prototype `victim` sent; `class`, its own prototype of `target_class`."))
    victim: int | None = Field(default=None, ge=0, description=(
        "`prototype-shift` with `toward: device`: whose prototypes (required there, refused elsewhere)."))
    identities: int = Field(default=3, ge=1, description=(
        "`sybil`: how many other devices' ids (drawn from the seed) it also sends its share under."))
    z: float | None = Field(default=None, description=(
        "`alie`: the shift in standard deviations; null: derived from the neighbourhood's size and the liars "
        "expected in it (the entry's share of the devices)."))
    epsilon: float = Field(default=0.1, gt=0, description="`ipm`: the factor of the reversed honest mean.")
    deviation: Literal["std", "unit-vec", "sign"] = Field(default="std", description=(
        "`min-max` and `min-sum`: the perturbation subtracted from the honest mean: their coordinate-wise standard "
        "deviation, the mean's unit vector, or its sign."))
    options: dict[str, Any] = Field(default_factory=dict, description=(
        "An attack of your own: the options its class is given (`self.options`); the shipped kinds take none."))

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.kind) if isinstance(self.kind, list) else (self.kind,)

    @model_validator(mode="after")
    def _one_way_to_choose(self) -> AdversarySection:
        kinds = self.kinds
        if not kinds or len(set(kinds)) != len(kinds):
            raise ValueError(f"adversaries: kind must name distinct attacks, got {self.kind}")
        if self.options and all(k in ATTACK_KINDS for k in kinds):
            raise ValueError(f"adversaries: options are for an attack of your own; {'+'.join(kinds)} takes none")
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
        for key, owners in (("z", ("alie",)), ("epsilon", ("ipm",)), ("deviation", ("min-max", "min-sum"))):
            # at its default it means nothing either way: a resolved scenario (a bundle's) spells every field
            if getattr(self, key) != type(self).model_fields[key].default and not set(owners) & set(kinds):
                raise ValueError(f"adversaries: {key} is {' and '.join(owners)}'s, not {'+'.join(kinds)}'s")
        if self.target_class is not None and not needs_target and "label-flip" not in kinds:
            raise ValueError(f"adversaries: target_class means nothing to {'+'.join(kinds)}")
        return self


class ProfileEntry(Section):
    """One device class of ``devices.profiles`` and the share of the devices it gets."""

    name: str = Field(min_length=1, description=(
        "A named device class (the reference page's Device classes), or your own label; a label of your own needs "
        "`flops_per_s` and `joules_per_flop`."))
    fraction: float = Field(gt=0, le=1, description=(
        "Share of the devices given this class, drawn from the seed; the fractions sum to 1."))
    flops_per_s: float | None = Field(default=None, gt=0, description=(
        "Training throughput in FLOP/s; null: the named class's."))
    joules_per_flop: float | None = Field(default=None, ge=0, description=(
        "Compute energy in J per FLOP; null: the named class's."))
    battery_j: float | None = Field(default=None, gt=0, description=(
        "Battery capacity in J for this class; null: `devices.battery_j` (or unlimited)."))

    @model_validator(mode="after")
    def _figures_known(self) -> ProfileEntry:
        if self.name not in PROFILES and (self.flops_per_s is None or self.joules_per_flop is None):
            raise ValueError(f"devices.profiles: {unknown_class(self.name)}")
        return self


class RadioSection(Section):
    """A radio of your own: joules per byte sent and received, watts drawn for up to ``tail_s``
    seconds after a transfer (its tail), and watts while it listens (idle)."""

    send_j_per_byte: float = Field(ge=0, description="Joules per byte sent.")
    receive_j_per_byte: float = Field(ge=0, description="Joules per byte received.")
    tail_w: float = Field(default=0.0, ge=0, description=(
        "Watts drawn for up to `tail_s` seconds after the radio was last busy (its tail); a transfer within the tail "
        "cuts it short. Set with `tail_s` or not at all."))
    tail_s: float = Field(default=0.0, ge=0, description="How long the tail lasts, in seconds.")
    idle_w: float = Field(default=0.0, ge=0, description=(
        "Watts while the radio listens, charged over the simulated time the device has energy."))

    @model_validator(mode="after")
    def _tail_whole(self) -> RadioSection:
        if (self.tail_w > 0) != (self.tail_s > 0):
            raise ValueError("devices.radio: a tail needs both tail_w (W) and tail_s (s)")
        return self


class DevicesSection(Section):
    """Devices as they are: compute speed and energy per device class, a radio, and
    batteries. Absent (the default), none of it runs and results are as before."""

    profiles: list[ProfileEntry] = Field(default=[], description=(
        "Device classes, each given to a `fraction` of the devices."))
    file: str | None = Field(default=None, description=(
        "Or per-device figures, CSV (header row) or YAML (a list of mappings): `device` (id) and either `profile` (a "
        "named class) or `flops_per_s` and `joules_per_flop`, optionally `battery_j`; every device once."))
    radio: Literal["wifi", "ble", "lte"] | RadioSection | None = Field(default=None, description=(
        "What a byte costs: a preset (`wifi`, `ble`, `lte`; the reference page's Radio presets) or a radio of your "
        "own (a mapping); "
        "null: communication is free."))
    battery_j: float | None = Field(default=None, gt=0, description=(
        "Every device's battery capacity in J unless its class or row gives one; null: unlimited."))
    recharge_every_s: float | None = Field(default=None, gt=0, description=(
        "Every battery is full again this often, in seconds (needs a battery); null: never."))
    recharge_at_s: float | None = Field(default=None, ge=0, description=(
        "The first recharge, in seconds; null: at `recharge_every_s`."))

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
    name: str = Field(default="scenario", description=(
        "Label of the run, used in results and in the default output folder names."))
    description: str = Field(default="", description="Free text about the scenario; the run does not use it.")
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description=(
        "The one seed every random choice derives from, through named streams (data split, model initialisation, "
        "per-device training, graph, contacts, churn, participation, device clocks, dynamic schedule); the same seed "
        "gives the same numbers."))
    rounds: int = Field(default=20, ge=1, description=(
        "Synchronous rounds: in each, every device fuses what arrived since its last fusion, trains, is evaluated "
        "when due and shares. With contacts, devices train on their own clocks until `contacts.duration_s` instead, "
        "and methods with a final phase count `duration_s / asynchronous.train_period_s` rounds (`rounds` when a "
        "trace sets no duration)."))
    dataset: DatasetSection = Field(default=DatasetSection(), description="The data, and how it is split into devices.")
    model: ModelSection = Field(default=ModelSection(), description="The model every device trains.")
    training: TrainingSection = Field(default=TrainingSection(), description=(
        "Local training: SGD on the cross-entropy, to which methods may add terms."))
    algorithm: AlgorithmSection = Field(default=AlgorithmSection(), description=(
        "The federated method (`name`) and its options, which are the method's own keys next to `name` (a shipped "
        "method's options: `p2pfed explain algorithm.METHOD`)."))
    topology: TopologySection = Field(default=TopologySection(), description=(
        "The static graph of which devices exchange, and its links' bandwidth and latency (synchronous rounds; "
        "`contacts.kind: static` reuses the graph)."))
    engine: EngineSection = Field(default=EngineSection(), description=(
        "How the simulation runs: the round length, participation, messages, threads and memory."))
    evaluation: EvaluationSection = Field(default=EvaluationSection(), description=(
        "When each device's model is scored on its test split, and on what."))
    dynamic: DynamicSection = Field(default=DynamicSection(), description=(
        "Training data that appears over time (FedSub journal Sec. 4.5): classes hidden at the start and returned one"
        " at a time. Off unless `devices_fraction` > 0."))
    contacts: ContactsSection = Field(default=ContactsSection(), description=(
        "Intermittent connectivity: devices exchange only during contacts. `kind: none` (the default) keeps "
        "synchronous rounds over `topology`; any other kind runs the opportunistic runtime, without rounds."))
    asynchronous: AsynchronousSection = Field(default=AsynchronousSection(), description=(
        "How devices learn when there are contacts instead of rounds (any `contacts.kind` but `none`)."))
    forwarding: ForwardingSection = Field(default=ForwardingSection(), description=(
        "Store-carry-forward over contacts: a device keeps the parts it received and passes them on to the devices it"
        " meets later, so they spread epidemically."))
    churn: ChurnSection = Field(default=ChurnSection(), description=(
        "Devices go offline and come back, with exponential online and offline durations (all start online). An "
        "offline device neither trains nor communicates, and its transfers in flight are aborted. Off while both "
        "means are null."))
    adversaries: list[AdversarySection] = Field(default=[], description=(
        "Devices that lie: each entry chooses devices and an attack, which wraps their method the same way in every "
        "runtime. Empty (the default): every device is honest."))
    security: SecuritySection = Field(default=SecuritySection(), description=(
        "Authentication of artifacts between devices: owners sign what they share, receivers check it."))
    devices: DevicesSection = Field(default=DevicesSection(), description=(
        "Devices as they are: compute speed and energy per device class, a radio and batteries. Absent (the default),"
        " none of it runs and results are as without it."))

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
        if self.engine.shards > 1 and (self.contacts.kind != "none" or self.devices.opted_in()):
            raise ValueError("engine.shards: splits synchronous rounds over processes; it needs contacts.kind: none "
                             "and no devices section (the energy account spans shards), or shards: 1")
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
