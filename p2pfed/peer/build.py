"""What one real peer runs, built from its config: the scenario, the peer's own device (the
scenario's or its own data file) with the scenario's method on it, the class schedule of
dynamic data, and the energy account of its device profile."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from p2pfed.algorithms import Algorithm
from p2pfed.energy import EnergyPlan
from p2pfed.peer.config import LoadedPeerConfig
from p2pfed.peer.data import load_own_data
from p2pfed.device.energy import EnergyMeter
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import build_algorithm, build_class_schedule
from p2pfed.scenario.loader import launch_problems, load_scenario
from p2pfed.scenario.spec import RunSpec
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.randomness import int_seed


@dataclass
class PeerDevice:
    """The scenario, this peer's algorithm (on its data), how many devices the scenario has, the
    classes visible per round (None: all its data, always) and its data's class counts."""

    loaded: RunSpec
    algo: Algorithm
    num_devices: int
    visible_classes: Callable[[int], frozenset[int] | None] | None
    class_counts: dict[str, list[int]]


def load_peer_spec(loaded_config: LoadedPeerConfig) -> RunSpec:
    """The run spec of the peer's scenario (its file, overrides and seed)."""
    cfg = loaded_config.config
    return load_scenario(loaded_config.resolve(cfg.scenario), cfg.overrides, cfg.seed)


def build_peer_device(loaded_config: LoadedPeerConfig, loaded: RunSpec | None = None) -> PeerDevice:
    """Build the peer's device from its scenario's spec (``loaded``, else loaded from the config);
    a problem is a ScenarioError naming the config."""
    cfg = loaded_config.config
    loaded = load_peer_spec(loaded_config) if loaded is None else loaded
    sc = loaded.scenario
    where = loaded_config.source
    if problems := launch_problems(loaded, check_imports=False):
        raise ScenarioError([f"{where}: scenario {p}" for p in problems])
    dataset = loaded.federation
    device = None
    if cfg.data is not None:
        device = load_own_data(loaded_config.resolve(cfg.data.path), cfg.id,
                               num_features=dataset.num_features, num_classes=dataset.num_classes,
                               test_fraction=cfg.data.test_fraction, seed=int_seed(sc.seed, "data-split"))
    elif cfg.id >= len(dataset.devices):
        raise ScenarioError([f"{where}: id: the scenario has devices 0..{len(dataset.devices) - 1}, "
                             f"got {cfg.id} (or give data.path)"])
    algo = build_algorithm(loaded, dataset, cfg.id, device=device)
    # Dynamic data follows the same schedule as in the simulator (a peer with its own data
    # keeps it whole: the schedule was drawn for the scenario's devices).
    schedule = build_class_schedule(loaded) if device is None else None
    visible_classes = (lambda r: schedule.visible(cfg.id, r)) if schedule else None
    own = algo.ctx.device
    class_counts = {"train": np.bincount(own.y_train, minlength=dataset.num_classes).tolist(),
                    "test": np.bincount(own.y_test, minlength=dataset.num_classes).tolist()}
    return PeerDevice(loaded, algo, len(dataset.devices), visible_classes, class_counts)


def peer_energy_meter(loaded: RunSpec, me: int, recorder: Recorder, where: object) -> EnergyMeter | None:
    """The energy this peer would spend as the scenario's device ``me`` (``devices``): its work
    priced by its profile, its bytes and its radio's tail and idle power. Its steps take the time
    they take (no simulated throughput) and nothing stops it; the caller sets the meter's clock."""
    plan = loaded.energy_plan
    if plan is None:
        return None
    if plan.has_batteries:
        raise ScenarioError([f"{where}: scenario devices: batteries are simulated only (p2pfed run); "
                             "real peers report the energy they would spend, without stopping"])
    if plan.profiles is not None and me >= len(plan.profiles):
        raise ScenarioError([f"{where}: id: device profiles are drawn for the scenario's devices "
                             f"0..{len(plan.profiles) - 1}, got {me}"])
    own = EnergyPlan(1, None if plan.profiles is None else (plan.profiles[me],), plan.radio, (None,))
    return EnergyMeter(own, recorder)
