"""Checks that need more than the schema, run before any work: the files a scenario names read
cleanly with the readers the run uses, and the run fits in memory.

Why: ``p2pfed validate`` must find a damaged topology, trace or data file, and ``run`` must
refuse it before training anything, each as one line naming the scenario file, the field and
the damaged file (with its line where the format has lines). The readers themselves name the
file; this module adds the scenario file and field in front.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import cast

from p2pfed.scenario.contacts import trace_contacts
from p2pfed.network.contacts.plan import ContactError
from p2pfed.network.contacts.traces import read_trace
from p2pfed.network.topology import TopologyError, read_topology_file, require_connected
from p2pfed.scenario.budget import device_count, memory_problems
from p2pfed.scenario.spec import RunSpec
from p2pfed.scenario.errors import ScenarioError


def check_dataset_file(loaded: RunSpec, path: Path | None) -> None:
    """The packaged-format WISDM file (.npz or .arff) a scenario names (None: the packaged
    file), its users and its feature columns."""
    from p2pfed.data.wisdm import load_arrays, select_features, select_users  # numpy/arff only when needed

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # skipped ARFF lines are reported when the run loads them
        arrays, source = load_arrays(path)
    select_users(arrays["user"], loaded.scenario.dataset.users, source)
    select_features(arrays["feature_names"], loaded.scenario.dataset.features, source)


def file_problems(loaded: RunSpec) -> list[str]:
    """One 'scenario: field: problem' line per file that its reader refuses."""
    sc, problems = loaded.scenario, []
    known_devices = sc.dataset.name == "synthetic" or sc.dataset.path is None

    def check(field: str, read: Callable[[], object]) -> None:
        try:
            read()
        except (ValueError, OSError) as exc:  # every reader raises a ValueError naming the file
            problems.append(f"{loaded.source}: {field}: {exc}")

    if sc.dataset.name == "wisdm" and sc.dataset.path is not None:
        check("dataset.path", lambda: check_dataset_file(loaded, loaded.resolve(cast(str, sc.dataset.path))))
    elif sc.dataset.name == "wisdm" and sc.dataset.features is not None:
        check("dataset.features", lambda: check_dataset_file(loaded, None))
    if sc.topology.kind == "file" and sc.contacts.kind in ("none", "static"):
        def topology() -> None:
            path = loaded.resolve(sc.topology.file)
            assert path is not None   # the schema requires topology.file with kind 'file'
            graph = read_topology_file(path)
            nodes = graph.number_of_nodes()
            if known_devices and nodes != device_count(sc):
                raise TopologyError(f"{path}: has {nodes} nodes but the scenario has "
                                    f"{device_count(sc)} devices")
            if not sc.topology.allow_disconnected:
                require_connected(graph, path)
        check("topology.file", topology)
    if sc.contacts.kind == "trace":
        def trace() -> None:
            path = loaded.resolve(sc.contacts.file)
            assert path is not None and sc.contacts.format is not None   # required with kind 'trace'
            contacts = read_trace(path, sc.contacts.format, window_s=sc.contacts.window_s)
            if known_devices:
                trace_contacts(contacts, sc.contacts, device_count(sc), str(path))
            elif not contacts:
                raise ContactError(f"{path}: the trace holds no contacts")
        check("contacts.file", trace)
    return problems


def preflight(loaded: RunSpec) -> None:
    """Raise ScenarioError with every problem found, one line each; silent when all is well."""
    problems = file_problems(loaded) + memory_problems(loaded)
    if problems:
        raise ScenarioError(problems)
