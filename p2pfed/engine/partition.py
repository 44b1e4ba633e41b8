"""Devices split into shards by the graph, so that most neighbours share a shard.

Recursive Kernighan-Lin bisection (networkx's ``kernighan_lin_bisection``): a set of devices is
split into two parts sized in proportion to the shards each will hold, the split refined by
swapping pairs of devices while that cuts fewer edges; each part is split again until there is
one part per shard. Pair swaps keep the sizes, so shards differ by at most one device per level,
and the seed makes the split the same in every process.
"""

from __future__ import annotations

import networkx as nx


def partition_graph(graph: nx.Graph, shards: int, *, seed: int = 0) -> list[list[int]]:
    """``shards`` lists of the graph's nodes (each sorted), together all of them, one per shard."""
    if not 1 <= shards <= max(graph.number_of_nodes(), 1):
        raise ValueError(f"engine.shards: {shards} shards for {graph.number_of_nodes()} devices; "
                         "give between 1 and the number of devices")
    return sorted(_split(graph, sorted(graph.nodes), shards, seed), key=lambda part: part[0])


def _split(graph: nx.Graph, nodes: list[int], shards: int, seed: int) -> list[list[int]]:
    if shards == 1:
        return [nodes]
    left = shards // 2
    size = round(len(nodes) * left / shards)
    start = (set(nodes[:size]), set(nodes[size:]))   # contiguous ids: a ring or a file's order cuts little
    a, b = nx.community.kernighan_lin_bisection(graph.subgraph(nodes), partition=start, seed=seed)
    if len(a) != size:   # the two parts may come back in either order
        a, b = b, a
    return [*_split(graph, sorted(a), left, seed), *_split(graph, sorted(b), shards - left, seed)]


def cut_edges(graph: nx.Graph, parts: list[list[int]]) -> int:
    """Edges whose two ends are in different shards."""
    owner = {d: k for k, part in enumerate(parts) for d in part}
    return sum(owner[u] != owner[v] for u, v in graph.edges)
