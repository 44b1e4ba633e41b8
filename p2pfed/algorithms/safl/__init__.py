"""SAFL without a server: clustered, guided Network-Slimming pruning, then Hermes aggregation.

``method`` is the method; ``slimming`` (unit gates, sparsity, pruning masks), ``heterogeneous``
(fusing sub-models of different shapes) and ``wire`` (a pruned sub-model on the wire) serve it."""

from p2pfed.algorithms.safl import method  # noqa: F401  (registration)
