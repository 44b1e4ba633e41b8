"""Refuse a run whose typical footprint would not fit in memory, before the models are built.

``p2pfed.scenario.budget`` (via ``engine.preflight``) refuses what is certain not to fit from a
lower bound per field, before any data is read; this estimate runs once the data is loaded and
counts what a simulation really holds, overheads included, so a run that would swap or be killed
part-way is refused too (and ``engine.device`` is resolved here).

A simulation holds, per device, its data (float64 arrays and their float32 tensors) and what its
method keeps: its model and the messages it shares and caches. The method says how much that is
(``Algorithm.device_bytes``, so this module never names a method; the default counts every
neighbour's message twice). The estimate adds those to a fixed cost per device (Python objects,
torch modules, generators) and per neighbour (its cache entry, the per-peer records of a fusion),
to the interpreter with its libraries, and to training's transient copies (stacked weights and
gradients) of the models that train together: at most ``GROUP_LIMIT`` at once, whatever the
federation's size. It is meant to stay above ``bench/scale.py``'s measured peak RSS for every
shipped method, without being so far above that it refuses runs that fit (a refusal costs a
flag, a run killed part-way costs the run). A run whose estimate exceeds the memory available is
refused with the estimate and the scenario fields that change it, instead of failing (or
swapping) hours later.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import networkx as nx

from p2pfed.algorithms.base import Algorithm, Options
from p2pfed.algorithms.memory import DeviceFacts
from p2pfed.data.dataset import FederatedDataset
from p2pfed.learning.batched_training import GROUP_LIMIT
from p2pfed.scenario.spec import RunSpec
from p2pfed.scenario.errors import ScenarioError

MIB = 2**20
GIB = 2**30
BASE_BYTES = 500 * MIB          # interpreter + torch + numpy + scikit-learn + simpy, imported
DEVICE_OVERHEAD_BYTES = 160_000  # per device: modules, tensors' headers, generators, loops, intake
PEER_OVERHEAD_BYTES = 4_000     # per device and neighbour: its cache entry and per-peer fusion records
CONTACT_DEGREE = 16              # peers assumed cached at once under contacts (no fixed graph)
TRAINING_COPIES = 2              # per model training in a batch: its stacked weights and their gradients


@dataclass(frozen=True)
class MemoryEstimate:
    devices: int
    per_device_bytes: int
    total_bytes: int
    batch_bytes: int = 0   # training's transient copies, bounded by the batch, not per device

    def describe(self) -> str:
        return (f"about {self.total_bytes / GIB:.1f} GiB for {self.devices} devices "
                f"({self.per_device_bytes / MIB:.2f} MiB each)")


def estimate_memory(devices: int, data_bytes: int, model_bytes: int, message_bytes: int,
                    degree: float, method: type[Algorithm] = Algorithm,
                    options: Options | None = None) -> MemoryEstimate:
    """``data_bytes``: all devices' arrays together; ``model_bytes``: one model's parameters;
    ``message_bytes``: one encoded share; ``degree``: mean neighbours per device; ``method`` (with
    its ``options``) says what one device of its holds (``Algorithm.device_bytes``)."""
    device_data = data_bytes / max(devices, 1)
    facts = DeviceFacts(model_bytes=model_bytes, message_bytes=message_bytes, degree=degree, data_bytes=device_data)
    held = method.device_bytes(Options() if options is None else options, facts)
    per_device = DEVICE_OVERHEAD_BYTES + PEER_OVERHEAD_BYTES * degree + 1.5 * device_data + held
    batch = TRAINING_COPIES * model_bytes * min(devices, GROUP_LIMIT)
    return MemoryEstimate(devices, int(per_device), int(BASE_BYTES + batch + devices * per_device), int(batch))


def available_bytes() -> int | None:
    """Memory this process may still use: ``MemAvailable`` (Linux), else physical memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_problem(estimate: MemoryEstimate, limit_bytes: int | None, *, limit_field: str,
                   devices_field: str) -> str | None:
    """One 'field: problem' line if the run does not fit in ``limit_bytes``, else None."""
    if limit_bytes is None or estimate.total_bytes <= limit_bytes:
        return None
    fit = max(int((limit_bytes - BASE_BYTES - estimate.batch_bytes) / estimate.per_device_bytes), 0)
    return (f"{devices_field}: the run needs {estimate.describe()}, more than the "
            f"{limit_bytes / GIB:.1f} GiB available ({limit_field}); about {fit} devices fit: "
            f"lower {devices_field}, or model.hidden / topology.degree (smaller messages, fewer "
            f"neighbours)")


def resolve_device(requested: str, source: str) -> str:
    """The torch device a run trains on. Only the CPU path exists so far: ``auto`` is ``cpu``,
    and ``cuda`` is refused up front (with the reason) rather than half-run."""
    if requested in ("cpu", "auto"):
        return "cpu"
    import torch

    why = ("no CUDA GPU is visible to PyTorch (torch.cuda.is_available() is False)"
           if not torch.cuda.is_available() else "the GPU training path is not built yet")
    raise ScenarioError([f"{source}: engine.device: cuda requested but {why}; use cpu or auto"])


def expected_degree(loaded: RunSpec, devices: int) -> float | None:
    """Mean neighbours per device, known from the scenario without building the graph (a
    complete graph over 10,000 devices alone would not fit); None when only the graph knows."""
    sc, topo = loaded.scenario, loaded.scenario.topology
    if sc.contacts.kind not in ("none", "static"):
        return float(min(devices - 1, CONTACT_DEGREE))
    return {"complete": devices - 1, "ring": min(devices - 1, 2), "small-world": min(devices - 1, topo.k),
            "random-regular": min(devices - 1, topo.degree)}.get(topo.kind)


def check_memory(loaded: RunSpec, dataset: FederatedDataset, graph: nx.Graph | None = None) -> MemoryEstimate:
    """Raise a ScenarioError naming the field to change if the run would not fit in memory
    (``graph``: the built graph, for topologies whose degree only it knows)."""
    from p2pfed.device import full_model_bytes
    from p2pfed.scenario.build import build_device_model

    sc = loaded.scenario
    n = len(dataset.devices)
    model = build_device_model(loaded, dataset.num_features, dataset.num_classes)   # the real one, sized
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    data_bytes = sum(a.nbytes for d in dataset.devices for a in (d.x_train, d.y_train, d.x_test, d.y_test))
    degree = expected_degree(loaded, n)
    if degree is None:
        degree = 2 * graph.number_of_edges() / max(n, 1) if graph is not None else float(n - 1)
    estimate = estimate_memory(n, data_bytes, model_bytes, full_model_bytes(model), degree,
                               loaded.method, loaded.options)
    limit_field = "engine.max_memory_gib"
    limit = (int(sc.engine.max_memory_gib * GIB) if sc.engine.max_memory_gib is not None else available_bytes())
    if sc.engine.max_memory_gib is None:
        limit_field = "MemAvailable at start; engine.max_memory_gib sets another limit"
    devices_field = "dataset.synthetic.num_devices" if sc.dataset.name == "synthetic" else "dataset (fewer devices)"
    problem = memory_problem(estimate, limit, limit_field=limit_field, devices_field=devices_field)
    if problem is not None:
        raise ScenarioError([f"{loaded.source}: {problem}"])
    return estimate
