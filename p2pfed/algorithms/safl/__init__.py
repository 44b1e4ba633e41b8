"""SAFL without a server: clustered, guided Network-Slimming pruning, then Hermes aggregation.

``method`` is the method (on the MLP or a CNN); ``slimming`` (scaling factors: a CNN's BN
scales or the MLP's unit gates, sparsity, pruning masks), ``heterogeneous``
(fusing sub-models of different shapes) and ``wire`` (a pruned sub-model on the wire) serve it."""

from p2pfed.algorithms.safl import method  # noqa: F401  (registration)
