"""The options every method with a robust combination shares (``algorithm.robust`` and its
parameters), so the averaging family and FedSub's row fusion read the same keys."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from p2pfed.algorithms.base import Options


class RobustOptions(Options):
    """How received models (or class rows) are combined: the weighted mean (``none``), or a rule
    against peers that lie (``p2pfed/learning/robust_fusion.py``)."""

    robust: Literal["none", "median", "trimmed-mean", "krum", "multi-krum", "clip", "clipped-gossip",
                    "geometric-median"] = Field("none", description=(
        "How received models (for FedSub, cluster-mates' class rows; for SAFL, stage two's elements) are combined: "
        "`none`, the sample-count-weighted mean; `median` or `trimmed-mean`, coordinate-wise, every model counting "
        "once whatever sample count it claims; `krum`, the `krum_select` models with the best Krum scores, averaged; "
        "`multi-krum`, the n - f best-scored (f: `byzantine`); `clip`, every peer's difference to the own model "
        "clipped to `clip_norm` (self-centred clipping), then the weighted mean; `clipped-gossip`, the same with the "
        "radius chosen each fusion as the peers' (f + 1)-th largest distance to the own model, so the f farthest "
        "are pulled in; `geometric-median`, the point nearest to all models in summed distance (smoothed "
        "Weiszfeld), every model counting once. None of them removes label-flipped models, which are not "
        "outliers."))
    trim_fraction: float = Field(0.2, ge=0, lt=0.5, description="`trimmed-mean`: the share of values cut at each end.")
    byzantine: int = Field(1, ge=0, description=(
        "`krum`, `multi-krum`: lying models tolerated (f), lowered to what n allows (n >= 2f + 3); "
        "`clipped-gossip`: the farthest peers clipped (f), lowered to the peers but one."))
    krum_select: int = Field(1, ge=1, description=(
        "`krum`: best-scored models averaged (1: Krum's single choice; n - f: multi-Krum)."))
    clip_norm: float = Field(1.0, gt=0, description=(
        "`clip`: the largest L2 norm of a peer's difference to the own model."))
