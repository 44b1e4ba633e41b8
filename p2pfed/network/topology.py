"""Static network graphs: who can talk to whom, and over links of what speed.

Every builder returns a networkx graph on nodes ``0..n-1`` whose edges carry ``bandwidth_bps``
and ``latency_s`` (the scenario's defaults unless a topology file sets them per edge).
"""

from __future__ import annotations

import math
from pathlib import Path

import networkx as nx

from p2pfed.textfile import read_text


class TopologyError(ValueError):
    """A topology that cannot be built as asked (names the file or parameter at fault)."""


EDGE_ATTRIBUTES = (("bandwidth_bps", float), ("latency_s", float))


def read_topology_file(path: Path) -> nx.Graph:
    """The graph in an edge list or GraphML file, every edge's link values checked.

    A damaged or wrong-format file raises TopologyError naming the file and the line (edge
    list), or the line and column of an XML error, or the edge (GraphML)."""
    if not path.exists():
        raise TopologyError(f"{path}: topology file not found")
    if path.suffix.lower() in {".graphml", ".xml"}:
        try:
            g = nx.Graph(nx.read_graphml(path))
        except Exception as exc:  # networkx and ElementTree raise many types for malformed files
            raise TopologyError(f"{path}: cannot read GraphML: {exc}") from None
        for u, v, data in g.edges(data=True):
            _check_edge(f"{path}: edge {u}-{v}", u, v, data)
        return g
    return _read_edgelist(path)


def _read_edgelist(path: Path) -> nx.Graph:
    """``a b`` or ``a b bandwidth_bps latency_s`` per line, parsed line by line by networkx so
    that every problem names its line."""
    text = read_text(path, "edge list", TopologyError)
    g = nx.Graph()
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) not in (2, 2 + len(EDGE_ATTRIBUTES)):
            raise TopologyError(f"{path}:{number}: expected 'a b' or 'a b bandwidth_bps latency_s', "
                                f"got {len(fields)} fields")
        try:
            edge = nx.parse_edgelist([" ".join(fields)], nodetype=str,
                                     data=EDGE_ATTRIBUTES if len(fields) > 2 else True)
        except (TypeError, ValueError, IndexError) as exc:
            raise TopologyError(f"{path}:{number}: {exc}") from None
        ((u, v, data),) = edge.edges(data=True)
        _check_edge(f"{path}:{number}", u, v, data)
        g.add_edge(u, v, **data)
    return g


def _check_edge(where: str, u: object, v: object, data: dict) -> None:
    """Link values a simulation can use: bandwidth finite > 0, latency finite >= 0."""
    if u == v:
        raise TopologyError(f"{where}: an edge needs two distinct nodes, got {u!r} twice")
    for key, positive in (("bandwidth_bps", True), ("latency_s", False)):
        if key not in data:
            continue
        try:
            value = float(data[key])
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            bound = "> 0" if positive else ">= 0"
            raise TopologyError(f"{where}: {key} must be a finite number {bound}, got {data[key]!r}")
        data[key] = value


def require_connected(g: nx.Graph, path: Path) -> None:
    """A file whose graph leaves some nodes with no path to the others would run to
    complete-looking results in which those devices never learn from anyone: refuse it, naming
    the nodes cut off from the largest part (``topology.allow_disconnected`` opts in)."""
    if g.number_of_nodes() <= 1 or nx.is_connected(g):
        return
    parts = sorted(nx.connected_components(g), key=lambda c: (-len(c), min(map(_node_sort_key, c))))
    cut = sorted((n for part in parts[1:] for n in part), key=_node_sort_key)
    shown = ", ".join(map(str, cut[:10])) + (f" and {len(cut) - 10} more" if len(cut) > 10 else "")
    raise TopologyError(f"{path}: nodes {shown} have no path to the other {len(parts[0])} ({len(parts)} separate "
                        "parts); connect them, or set topology.allow_disconnected: true")


def _from_file(path: Path, num_devices: int, allow_disconnected: bool = False) -> nx.Graph:
    g = read_topology_file(path)
    nodes = sorted(g.nodes, key=_node_sort_key)
    if len(nodes) != num_devices:
        raise TopologyError(f"{path}: has {len(nodes)} nodes but the scenario has {num_devices} devices")
    if not allow_disconnected:
        require_connected(g, path)
    # Node ids are mapped to devices in sorted order (numerically when they are integers).
    return nx.relabel_nodes(g, {node: i for i, node in enumerate(nodes)})


def _node_sort_key(node: object) -> tuple[int, int | str]:
    text = str(node)
    return (0, int(text)) if text.lstrip("-").isdigit() else (1, text)


def build_topology(kind: str, num_devices: int, *, seed: int, k: int = 4, p: float = 0.1,
                   degree: int = 3, file: str | Path | None = None,
                   bandwidth_bps: float = 1e6, latency_s: float = 0.05,
                   allow_disconnected: bool = False) -> nx.Graph:
    """Build the named graph; random kinds are redrawn from ``seed`` until connected, and a file's
    graph must be connected unless ``allow_disconnected``."""
    n = num_devices
    if kind == "complete":
        g = nx.complete_graph(n)
    elif kind == "ring":
        g = nx.cycle_graph(n)
    elif kind == "erdos-renyi":
        g = _connected(lambda s: nx.erdos_renyi_graph(n, p, seed=s), seed, "erdos-renyi", f"p={p}")
    elif kind == "small-world":
        if not 2 <= k < n:
            raise TopologyError(f"topology.k must be in 2..{n - 1} for {n} devices, got {k}")
        g = nx.connected_watts_strogatz_graph(n, k, p, tries=100, seed=seed)
    elif kind == "random-regular":
        if degree >= n or (degree * n) % 2:
            raise TopologyError(f"topology.degree={degree} impossible for {n} devices "
                                "(needs degree < devices and degree*devices even)")
        g = _connected(lambda s: nx.random_regular_graph(degree, n, seed=s), seed,
                       "random-regular", f"degree={degree}")
    elif kind == "file":
        if file is None:
            raise TopologyError("topology.file is required when topology.kind is 'file'")
        g = _from_file(Path(file), n, allow_disconnected)
    else:
        raise TopologyError(f"unknown topology.kind {kind!r}")
    g.add_nodes_from(range(n))
    for _, _, data in g.edges(data=True):
        data.setdefault("bandwidth_bps", float(bandwidth_bps))
        data.setdefault("latency_s", float(latency_s))
        data["bandwidth_bps"] = float(data["bandwidth_bps"])
        data["latency_s"] = float(data["latency_s"])
    return g


def _connected(make, seed: int, kind: str, what: str, tries: int = 100) -> nx.Graph:
    for attempt in range(tries):
        g = make(seed + attempt)
        if g.number_of_nodes() <= 1 or nx.is_connected(g):
            return g
    raise TopologyError(f"topology {kind} with {what} stayed disconnected after {tries} draws")
