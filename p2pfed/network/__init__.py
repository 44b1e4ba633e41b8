"""Network graphs: who can talk to whom over which links (topology kinds and files).

Below the scenario and the runtimes: the scenario builds a graph from here, the simulator runs
over it and the launcher turns it into peers' neighbour lists.
"""

from p2pfed.network.topology import TopologyError, build_topology

__all__ = ["TopologyError", "build_topology"]
