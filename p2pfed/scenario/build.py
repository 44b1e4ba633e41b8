"""Turning a validated scenario into the objects a runtime drives: data, models, algorithms.

Shared by the simulation and the real-peer runtime so both build devices the same way.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import torch

from p2pfed.algorithms import Algorithm, DeviceContext, algorithm_class
from p2pfed.data import (DataError, DeviceData, FederatedDataset, PartitionError, PartitionSpec,
                         load_dataset)
from p2pfed.data.dynamic import ClassSchedule, draw_class_schedule
from p2pfed.engine.topology import build_topology
from p2pfed.learning.model import build_model
from p2pfed.learning.training import TrainingConfig
from p2pfed.scenario.loader import LoadedScenario, ScenarioError, algorithm_options


def load_scenario_dataset(loaded: LoadedScenario) -> FederatedDataset:
    """The scenario's devices. A bad data file or an impossible partition is a ScenarioError
    (one line per problem, naming the file and column or the partition key)."""
    ds = loaded.scenario.dataset
    seed = loaded.scenario.seed
    common = {"test_fraction": ds.test_fraction, "seed": seed}
    if ds.name == "synthetic":
        return load_dataset("synthetic", **common, **ds.synthetic.model_dump())
    path = loaded.resolve(ds.path)
    if ds.name in ("digits", "files"):
        spec = PartitionSpec(**ds.partition.model_dump())
        own = {} if ds.name == "digits" else {
            "path": str(path), "device_column": ds.device_column, "label_column": ds.label_column,
            "class_names": ds.class_names}
        try:
            return load_dataset(ds.name, **common, scaling=ds.scaling, partition_spec=spec, **own)
        except DataError as exc:
            raise ScenarioError(exc.problems) from None
        except PartitionError as exc:
            raise ScenarioError([f"{loaded.source}: dataset.partition: {exc}"]) from None
    if ds.name == "wisdm":
        return load_dataset("wisdm", **common, scaling=ds.scaling, users=ds.users,
                            path=None if path is None else str(path))
    return load_dataset("wisdm-raw", **common, scaling=ds.scaling, path=str(path))


def device_seeds(seed: int, num_devices: int) -> list[np.random.SeedSequence]:
    """One independent random stream per device, all derived from the scenario seed."""
    return np.random.SeedSequence(seed).spawn(num_devices)


def device_rounds(sc) -> int:
    """Rounds a device runs: the scenario's, or with contacts the trainings expected in
    ``contacts.duration_s`` (methods with a final local phase need to know the end)."""
    if sc.contacts.kind == "none" or sc.contacts.duration_s is None:
        return sc.rounds
    return max(1, math.ceil(sc.contacts.duration_s / sc.asynchronous.train_period_s))


def build_algorithm(loaded: LoadedScenario, dataset: FederatedDataset, device_id: int,
                    shared: dict | None = None, device: DeviceData | None = None) -> Algorithm:
    """The scenario's method for one device. Every device starts from the same initial weights
    (drawn from the scenario seed), as a server's first broadcast would give them.

    ``device`` replaces the dataset's device ``device_id`` (a real peer's own data); it must fit
    the federation's model (same features and classes)."""
    sc = loaded.scenario
    device = dataset.devices[device_id] if device is None else device
    # spawn(n)[i] depends on i only, so a peer gets its stream without knowing n.
    seq = device_seeds(sc.seed, device_id + 1)[device_id]
    gen = torch.Generator().manual_seed(int(seq.generate_state(1)[0]))
    model = build_model(dataset.num_features, dataset.num_classes, sc.model.hidden, seed=sc.seed)
    ctx = DeviceContext(device=device, num_classes=dataset.num_classes, model=model,
                        training=TrainingConfig(**sc.training.model_dump()),
                        rng=np.random.default_rng(seq), torch_generator=gen, rounds=device_rounds(sc),
                        shared=shared if shared is not None else {})
    cls = algorithm_class(sc.algorithm.name)
    return cls(ctx, algorithm_options(loaded))


def build_graph(loaded: LoadedScenario, num_devices: int) -> nx.Graph:
    """The scenario's network graph over ``num_devices`` devices."""
    sc, topo = loaded.scenario, loaded.scenario.topology
    return build_topology(topo.kind, num_devices, seed=sc.seed, k=topo.k, p=topo.p, degree=topo.degree,
                          file=loaded.resolve(topo.file), bandwidth_bps=topo.bandwidth_bps,
                          latency_s=topo.latency_s)


def build_algorithms(loaded: LoadedScenario, dataset: FederatedDataset) -> list[Algorithm]:
    shared: dict = {}
    return [build_algorithm(loaded, dataset, i, shared) for i in range(len(dataset.devices))]


def build_class_schedule(loaded: LoadedScenario, dataset: FederatedDataset) -> ClassSchedule | None:
    """The scenario's dynamic-data schedule (None: static data), drawn from its own seed stream."""
    dyn = loaded.scenario.dynamic
    if dyn.devices_fraction == 0:
        return None
    n = len(dataset.devices)
    rng = np.random.default_rng(np.random.SeedSequence(loaded.scenario.seed).spawn(n + 2)[-1])
    return draw_class_schedule([d.y_train for d in dataset.devices], devices_fraction=dyn.devices_fraction,
                               max_removed_fraction=dyn.max_removed_fraction,
                               return_every=dyn.return_every, rng=rng)
