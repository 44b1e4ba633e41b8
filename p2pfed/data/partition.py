"""Splitting one central labelled dataset across devices, the ways federated-learning papers do.

Every partitioner returns one array of sample indices per device; together they hold every
sample exactly once. Randomness comes from one generator, ``partition_rng(seed)``, a stream of
its own derived from the scenario seed, so changing how devices split their data or initialise
their models never changes which samples a device gets.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

PARTITIONS = ("natural", "iid", "dirichlet", "shards", "quantity")
MAX_DIRICHLET_DRAWS = 1000


class PartitionError(ValueError):
    """A partition that cannot be drawn (too few samples for the devices asked for, ...)."""


def named_stream(seed: int, purpose: str) -> np.random.SeedSequence:
    """A seed stream for one purpose: the scenario seed plus 64 bits hashed from ``purpose``,
    so streams for different purposes never coincide with each other or with ``[seed, id]``."""
    words = np.frombuffer(hashlib.sha256(purpose.encode()).digest()[:8], dtype=np.uint32)
    return np.random.SeedSequence([int(seed), *(int(w) for w in words)])


def partition_rng(seed: int) -> np.random.Generator:
    """The generator every partitioner draws from (swap here to centralise named streams)."""
    return np.random.default_rng(named_stream(seed, "partition"))


@dataclass(frozen=True)
class PartitionSpec:
    """How to split a central dataset; the fields mirror the scenario's ``dataset.partition``."""

    kind: str = "natural"
    num_devices: int = 10
    alpha: float = 0.5              # dirichlet: concentration; small = each class on few devices
    classes_per_device: int = 2     # shards: classes each device holds
    size_sigma: float = 1.0         # quantity: std of log device sizes (lognormal)
    min_samples: int = 10           # every drawn device gets at least this many samples

    def describe(self) -> dict[str, Any]:
        """The parameters that matter for this kind (for summaries)."""
        keep = {"natural": (), "iid": ("num_devices",), "dirichlet": ("num_devices", "alpha"),
                "shards": ("num_devices", "classes_per_device"),
                "quantity": ("num_devices", "size_sigma")}[self.kind]
        full = asdict(self)
        return {"kind": self.kind, **{k: full[k] for k in keep},
                **({"min_samples": self.min_samples} if keep else {})}


def partition(y: np.ndarray, spec: PartitionSpec, rng: np.random.Generator) -> list[np.ndarray]:
    """Sorted sample indices per device for labels ``y`` (any kind but ``natural``, which
    needs an owner column: see ``partition_natural``)."""
    y = np.asarray(y)
    if spec.kind not in PARTITIONS or spec.kind == "natural":
        raise PartitionError(f"partition kind must be one of {PARTITIONS[1:]} here, got {spec.kind!r}")
    if spec.num_devices < 1:
        raise PartitionError(f"num_devices must be >= 1, got {spec.num_devices}")
    need = spec.num_devices * spec.min_samples
    if len(y) < need:
        raise PartitionError(f"{len(y)} samples cannot give {spec.num_devices} devices "
                             f"{spec.min_samples} samples each (min_samples); use fewer devices")
    if spec.kind == "iid":
        parts = partition_iid(len(y), spec.num_devices, rng)
    elif spec.kind == "dirichlet":
        parts = partition_dirichlet(y, spec.num_devices, spec.alpha, rng, spec.min_samples)
    elif spec.kind == "shards":
        parts = partition_shards(y, spec.num_devices, spec.classes_per_device, rng)
    else:
        parts = partition_quantity(len(y), spec.num_devices, spec.size_sigma, rng, spec.min_samples)
    small = [(d, len(p)) for d, p in enumerate(parts) if len(p) < spec.min_samples]
    if small:
        d, n = small[0]
        raise PartitionError(f"{spec.kind}: device {d} got {n} samples, fewer than min_samples "
                             f"{spec.min_samples} ({len(small)} such devices); use fewer devices")
    return [np.sort(p).astype(np.int64) for p in parts]


def partition_natural(owner: np.ndarray) -> tuple[list[object], list[np.ndarray]]:
    """One device per distinct owner value, in sorted order: (owner values, indices)."""
    keys, inverse = np.unique(np.asarray(owner), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(keys)))[:-1]
    return [k.item() if hasattr(k, "item") else k for k in keys], np.split(order, bounds)


def partition_iid(n: int, num_devices: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random permutation cut into equal parts (sizes differ by at most one)."""
    return np.array_split(rng.permutation(n), num_devices)


def partition_quantity(n: int, num_devices: int, sigma: float, rng: np.random.Generator,
                       min_samples: int = 1) -> list[np.ndarray]:
    """Quantity skew: IID labels, device sizes proportional to lognormal(0, sigma) draws on top
    of ``min_samples`` each (largest remainders keep the total exact)."""
    weights = rng.lognormal(0.0, sigma, size=num_devices)
    spare = n - num_devices * min_samples
    share = spare * weights / weights.sum()
    sizes = np.floor(share).astype(np.int64)
    sizes[np.argsort(sizes - share)[:spare - sizes.sum()]] += 1   # largest fractional parts
    sizes += min_samples
    return np.split(rng.permutation(n), np.cumsum(sizes)[:-1])


def partition_dirichlet(y: np.ndarray, num_devices: int, alpha: float, rng: np.random.Generator,
                        min_samples: int = 1) -> list[np.ndarray]:
    """Label skew: each class is spread over the devices by proportions drawn from
    Dirichlet(alpha, ..., alpha); the draw is repeated until every device holds at least
    ``min_samples`` samples. Small alpha puts each class on few devices, large alpha nears IID."""
    classes = np.unique(y)
    members = [np.flatnonzero(y == c) for c in classes]
    for _ in range(MAX_DIRICHLET_DRAWS):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_devices)]
        for idx in members:
            idx = rng.permutation(idx)
            p = rng.dirichlet(np.full(num_devices, alpha))
            cuts = np.floor(np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
            for d, chunk in enumerate(np.split(idx, cuts)):
                parts[d].append(chunk)
        joined = [np.concatenate(p) for p in parts]
        if min(len(p) for p in joined) >= min_samples:
            return joined
    raise PartitionError(f"dirichlet alpha={alpha}: no draw in {MAX_DIRICHLET_DRAWS} gave each of "
                         f"{num_devices} devices {min_samples} samples; raise alpha, lower "
                         f"min_samples or use fewer devices")


def partition_shards(y: np.ndarray, num_devices: int, classes_per_device: int,
                     rng: np.random.Generator) -> list[np.ndarray]:
    """Pathological label skew: each device holds exactly ``classes_per_device`` classes.

    Classes are dealt round-robin in a random order (device d gets classes d*k .. d*k+k-1,
    modulo the class count), so every class goes to about the same number of devices; each
    class's samples are then split evenly among its devices."""
    classes = np.unique(y)
    k = classes_per_device
    if not 1 <= k <= len(classes):
        raise PartitionError(f"shards: classes_per_device must be in 1..{len(classes)}, got {k}")
    if num_devices * k < len(classes):
        raise PartitionError(f"shards: {num_devices} devices x {k} classes cannot cover all "
                             f"{len(classes)} classes; raise classes_per_device or num_devices")
    order = rng.permutation(classes)
    devices = rng.permutation(num_devices)
    holders: dict[int, list[int]] = {int(c): [] for c in classes}
    for slot, d in enumerate(devices):
        for j in range(k):
            holders[int(order[(slot * k + j) % len(classes)])].append(int(d))
    parts: list[list[np.ndarray]] = [[] for _ in range(num_devices)]
    for c, held_by in holders.items():
        idx = rng.permutation(np.flatnonzero(y == c))
        for d, chunk in zip(held_by, np.array_split(idx, len(held_by))):
            parts[d].append(chunk)
    return [np.concatenate(p) if p else np.array([], dtype=np.int64) for p in parts]
