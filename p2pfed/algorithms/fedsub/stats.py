"""What a FedSub device counts over a run, and the ``algorithm_stats`` it reports from the counts:
the K chosen per class clustering next to the literal rule's, cluster sizes, how often a class
fusion had a cluster-mate, the share of each layer's units a class subnetwork keeps, and the
subnetwork message bytes in this encoding and in the papers' accounting."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from p2pfed.algorithms.fedsub.robust_rows import RobustCount
from p2pfed.algorithms.fedsub.subnetworks import UnitMasks
from p2pfed.learning.units import UnitLayer

STAT_COUNTERS = ("clusterings", "k_sum", "literal_k_sum", "cluster_size_sum", "class_fusions",
                 "mate_fusions", "subnet_messages", "subnet_bytes", "paper_style_bytes",
                 "robust_groups", "robust_candidates", "robust_set_aside", "outliers_trimmed",
                 "subnetworks_extracted")


class FedSubCounts:
    """Run totals (``n``, keyed by ``STAT_COUNTERS``) and units kept per layer, summed over
    every extracted class subnetwork."""

    def __init__(self, layers: list[UnitLayer]) -> None:
        self.layers = layers
        self.n: dict[str, int] = dict.fromkeys(STAT_COUNTERS, 0)
        self.kept_by_layer = [0] * len(layers)

    def extracted(self, units: Mapping[int, UnitMasks]) -> None:
        for masks in units.values():
            self.kept_by_layer = [k + int(np.count_nonzero(m)) for k, m in zip(self.kept_by_layer, masks)]
        self.n["subnetworks_extracted"] += len(units)

    def subnetwork_message(self, tensors: dict[str, np.ndarray], units: Mapping[int, UnitMasks]) -> None:
        """One subnetwork message of these classes' ``units``, counted in both byte accountings."""
        value_bytes = 4   # both accountings at float32; the wire's bytes (engine.precision) are in comm
        self.n["subnet_messages"] += 1
        self.n["subnet_bytes"] += sum(int(t.nbytes) for t in tensors.values())
        # The papers' accounting (journal Fig. 6): each class's subnetwork counted on its own.
        self.n["paper_style_bytes"] += value_bytes * sum(
            int(np.count_nonzero(u)) * layer.row_width   # a kept unit: its weight row and bias (and BN's)
            for c in units for layer, u in zip(self.layers, units[c]))

    def clustering(self, k: int, literal_k: int, cluster_size: int) -> None:
        n = self.n
        n["clusterings"] += 1
        n["k_sum"] += k
        n["literal_k_sum"] += literal_k
        n["cluster_size_sum"] += cluster_size

    def robust(self, count: RobustCount) -> None:
        self.n["robust_groups"] += count.groups
        self.n["robust_candidates"] += count.candidates
        self.n["robust_set_aside"] += count.set_aside

    def report(self, *, predicted: int | None, proto_outliers: str, robust: str) -> dict[str, Any]:
        """The run's means and fractions (each only where its counts exist or its option is on);
        ``predicted``: the classes fused thanks to a predicted prototype, when prediction is on."""
        n = self.n
        out: dict[str, Any] = {}
        if n["clusterings"]:
            out["k_mean"] = n["k_sum"] / n["clusterings"]
            out["literal_k_mean"] = n["literal_k_sum"] / n["clusterings"]
            out["cluster_size_mean"] = n["cluster_size_sum"] / n["clusterings"]
        if n["class_fusions"]:
            out["fusions_with_mate_fraction"] = n["mate_fusions"] / n["class_fusions"]
        if n["subnetworks_extracted"]:
            out["subnetwork_kept_fraction_by_layer"] = {   # keyed by the layer's module: layers.0, body.4, head
                layer.params[0].rpartition(".")[0]: kept / (n["subnetworks_extracted"] * layer.size)
                for kept, layer in zip(self.kept_by_layer, self.layers)}
        if n["subnet_messages"]:
            out["subnet_message_bytes"] = n["subnet_bytes"] / n["subnet_messages"]
            out["subnet_message_bytes_paper_style"] = n["paper_style_bytes"] / n["subnet_messages"]
        if predicted is not None:
            out["predicted_classes_fused"] = predicted
        if proto_outliers != "none" and n["clusterings"]:
            out["prototype_outliers_per_clustering"] = n["outliers_trimmed"] / n["clusterings"]
        if robust != "none":
            out["robust_row_groups"] = n["robust_groups"]
            peers = n["robust_candidates"] - n["robust_groups"]   # every group's first candidate is the own row
            out["robust_peer_rows_set_aside_fraction"] = n["robust_set_aside"] / peers if peers else 0.0
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"counters": dict(self.n), "kept_by_layer": list(self.kept_by_layer)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """From a FedSub state (older ones lack some counters, or the units kept)."""
        self.n = {k: int(state["counters"].get(k, 0)) for k in STAT_COUNTERS}
        self.kept_by_layer = [int(k) for k in state.get("kept_by_layer", [0] * len(self.layers))]
