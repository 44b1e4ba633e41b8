"""Outlier-aware prototype clustering: prototypes far from every other are left out.

FedSub's K sweep only lets partitions with clusters of ``min_cluster_size`` members win, so a
prototype far from all the others (a liar's class prototype moved onto another class's, say)
is not left alone: it joins some cluster, and its rows are fused there. With ``proto_outliers:
trim`` a device first leaves out of each class's clustering the peers whose prototype's distance
to its nearest other prototype is more than ``proto_outlier_factor`` times the median of those
nearest-neighbour distances (the device's own prototype always stays). An honest device whose
data are unlike everyone else's is left out too: it loses its mates for that class, the price
of the rule.
"""

from __future__ import annotations

import numpy as np


def inliers(points: np.ndarray, own: int, factor: float) -> np.ndarray:
    """A bool per point: kept (True) or left out as an outlier; ``own`` is always kept. Fewer
    than three points, or a median nearest-neighbour distance of 0, keep everything."""
    n = len(points)
    keep = np.ones(n, dtype=bool)
    if n < 3:
        return keep
    from scipy.spatial.distance import cdist   # here: scipy.spatial is most of a start-up's imports after torch

    d = cdist(points, points)
    np.fill_diagonal(d, np.inf)
    nearest = d.min(axis=1)
    typical = float(np.median(nearest))
    if typical <= 0.0:
        return keep
    keep = np.asarray(nearest <= factor * typical)
    keep[own] = True
    return keep
