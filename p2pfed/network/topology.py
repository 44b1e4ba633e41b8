"""Static network graphs: who can talk to whom, and over links of what speed.

Every builder returns a networkx graph on nodes ``0..n-1`` whose edges carry ``bandwidth_bps``
and ``latency_s`` (the scenario's defaults unless a topology file sets them per edge).
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx


class TopologyError(ValueError):
    """A topology that cannot be built as asked (names the file or parameter at fault)."""


def _from_file(path: Path, num_devices: int) -> nx.Graph:
    if not path.exists():
        raise TopologyError(f"{path}: topology file not found")
    try:
        if path.suffix.lower() in {".graphml", ".xml"}:
            g = nx.Graph(nx.read_graphml(path))
        else:
            g = nx.read_edgelist(path, nodetype=str, data=[("bandwidth_bps", float), ("latency_s", float)]) \
                if _has_edge_data(path) else nx.read_edgelist(path, nodetype=str)
    except Exception as exc:  # networkx raises many types for malformed files
        raise TopologyError(f"{path}: cannot read topology: {exc}") from exc
    nodes = sorted(g.nodes, key=_node_sort_key)
    if len(nodes) != num_devices:
        raise TopologyError(f"{path}: has {len(nodes)} nodes but the scenario has {num_devices} devices")
    # Node ids are mapped to devices in sorted order (numerically when they are integers).
    return nx.relabel_nodes(g, {node: i for i, node in enumerate(nodes)})


def _has_edge_data(path: Path) -> bool:
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].split()
        if line:
            return len(line) >= 4
    return False


def _node_sort_key(node: object) -> tuple[int, int | str]:
    text = str(node)
    return (0, int(text)) if text.lstrip("-").isdigit() else (1, text)


def build_topology(kind: str, num_devices: int, *, seed: int, k: int = 4, p: float = 0.1,
                   degree: int = 3, file: str | Path | None = None,
                   bandwidth_bps: float = 1e6, latency_s: float = 0.05) -> nx.Graph:
    """Build the named graph; random kinds are redrawn from ``seed`` until connected."""
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
        g = _from_file(Path(file), n)
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
