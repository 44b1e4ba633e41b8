"""The options every method with a robust combination shares (``algorithm.robust`` and its
parameters), so the averaging family and FedSub's row fusion read the same keys."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from p2pfed.algorithms.base import Options


class RobustOptions(Options):
    """How received models (or class rows) are combined: the weighted mean (``none``), or a rule
    against peers that lie (``p2pfed/learning/robust_fusion.py``)."""

    robust: Literal["none", "median", "trimmed-mean", "krum", "clip"] = Field(
        "none", description="how the models are combined: the sample-weighted mean (none), or a rule against "
        "peers that lie (p2pfed/learning/robust_fusion.py)")
    trim_fraction: float = Field(0.2, ge=0, lt=0.5, description="trimmed-mean: the share cut at each end")
    byzantine: int = Field(1, ge=0, description="krum: the number of lying models tolerated (f)")
    krum_select: int = Field(1, ge=1, description="krum: models averaged among the best scored (1: Krum)")
    clip_norm: float = Field(1.0, gt=0, description="clip: the largest L2 norm of a peer's difference to the own model")
