"""The run spec: a scenario validated and built once into the typed objects every runtime takes.

``loader.build`` makes one from a file, a mapping or the Python API's values, resolving the
method's class (with its validated options) and the model factory there, once. The parts a run
is made of — the federation (the devices' data), the network graph, the contact plan, the
devices' energy plan — are built from it on first use and kept: the simulator, a real peer, a
bundle and the results files all take this object, and none of them reads the scenario's raw
mapping or turns a name into a class again. Each part is drawn from its own seed stream, so
building one or not never changes another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import overload

import networkx as nx

from p2pfed.algorithms import Algorithm, Attacker, Options
from p2pfed.data import FederatedDataset
from p2pfed.energy import EnergyPlan
from p2pfed.learning.model import ModelFactory
from p2pfed.network import build_topology
from p2pfed.scenario.contacts import Contacts, build_contact_plan
from p2pfed.scenario.devices import build_energy_plan
from p2pfed.scenario.federation import load_federation
from p2pfed.scenario.randomness import int_seed
from p2pfed.scenario.schema import Scenario
from p2pfed.scenario.swap import Swap


def resolve_from(base_dir: Path, path: str) -> Path:
    """``path`` as a file names it: relative to ``base_dir`` (the file's folder) unless absolute."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else base_dir / p


@dataclass(frozen=True)
class RunSpec:
    """A validated scenario, built once: its method's class and options and its model factory
    are resolved here, its parts built on first use; everything after loading reads them from
    this object, never from a name again."""

    scenario: Scenario
    source: str           # the file it came from, or "<embedded quickstart>"
    base_dir: Path        # where relative paths are resolved from
    method: type[Algorithm]   # the class ``algorithm.name`` names
    options: Options          # its options, validated against the scenario
    model_factory: ModelFactory | None   # the factory ``model.name`` names; None: the built-in MLP
    swapped: Swap | None = None   # another method than the file's: what it left out, and why
    attacks: Mapping[str, type[Attacker]] = field(default_factory=dict)   # the user's attacks ``adversaries`` name

    @overload
    def resolve(self, path: str) -> Path: ...

    @overload
    def resolve(self, path: None) -> None: ...

    def resolve(self, path: str | None) -> Path | None:
        """A path the scenario names, relative to its own folder unless absolute."""
        return None if path is None else resolve_from(self.base_dir, path)

    @cached_property
    def federation(self) -> FederatedDataset:
        """The devices' data (``dataset``); a bad file or partition is a ScenarioError."""
        sc = self.scenario
        return load_federation(sc.dataset, seed=int_seed(sc.seed, "data-split"), path=self.resolve(sc.dataset.path),
                               source=self.source)

    @property
    def num_devices(self) -> int:
        return len(self.federation.devices)

    @cached_property
    def graph(self) -> nx.Graph:
        """The network graph over the federation's devices (``topology``)."""
        sc, topo = self.scenario, self.scenario.topology
        return build_topology(topo.kind, self.num_devices, seed=int_seed(sc.seed, "graph"), k=topo.k, p=topo.p,
                              degree=topo.degree, file=self.resolve(topo.file), bandwidth_bps=topo.bandwidth_bps,
                              latency_s=topo.latency_s, allow_disconnected=topo.allow_disconnected)

    @cached_property
    def contacts(self) -> Contacts:
        """The contact plan and the run's duration (``contacts``; over ``kind: static`` the graph's
        edges, always up)."""
        sc, c = self.scenario, self.scenario.contacts
        graph = self.graph if c.kind == "static" else None
        return build_contact_plan(c, self.num_devices, seed=int_seed(sc.seed, "contacts"), graph=graph,
                                  file=self.resolve(c.file))

    @cached_property
    def energy_plan(self) -> EnergyPlan | None:
        """Each device's class, radio and battery (``devices``); None, and no data read, when the
        scenario does not opt in."""
        section = self.scenario.devices
        if not section.opted_in():
            return None
        return build_energy_plan(section, self.num_devices, seed=self.scenario.seed,
                                 file=self.resolve(section.file), source=self.source)
