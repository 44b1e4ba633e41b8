"""FedAli without a server: an Alignment-with-Prototypes layer, prototypes fused by k-means.

``method`` is the method; ``alignment`` holds the ALP layer and the optimal-transport plan."""

from p2pfed.algorithms.fedali import method  # noqa: F401  (registration)
