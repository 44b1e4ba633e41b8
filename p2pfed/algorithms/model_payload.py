"""Model payloads and their weighted average, shared by every method that exchanges weights.

Gossip averaging, FedProx, Ditto, FedHome and FedCLAR send the whole model; FedPer, FedRep and
ProtoHAR send only the body. All of them build, check and average payloads here, so the only
difference between them is which parameter names they pass.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from torch import nn

from p2pfed.algorithms.base import ArtifactError, Payload, expect_array


def model_payload(model: nn.Module, num_samples: int, names: Iterable[str] | None = None,
                  **meta: object) -> Payload:
    """The named parameters (all by default) as float32 arrays, with the sample count that
    weights the receivers' averages."""
    keep = None if names is None else set(names)
    tensors = {name: p.detach().cpu().numpy().astype(np.float32, copy=True)
               for name, p in model.named_parameters() if keep is None or name in keep}
    return Payload(meta={"num_samples": int(num_samples), **meta}, tensors=tensors)


def model_tensors(model: nn.Module, payload: Payload,
                  names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The payload's parameters, checked name by name against the local model's shapes."""
    keep = None if names is None else set(names)
    return {name: expect_array(payload, name, tuple(p.shape))
            for name, p in model.named_parameters() if keep is None or name in keep}


def sample_count(payload: Payload) -> int:
    """The sender's training-set size from the meta, checked."""
    n = payload.meta.get("num_samples")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ArtifactError(f"meta 'num_samples' must be an int >= 0, got {n!r}")
    return n


@torch.no_grad()
def average_into(model: nn.Module, own_weight: float,
                 peers: Sequence[tuple[dict[str, np.ndarray], float]],
                 names: Iterable[str] | None = None) -> None:
    """Replace the named parameters by the weighted mean of the model's own and the peers'.

    Accumulates in float64 so the result does not depend on the order peers arrived in beyond
    rounding; a zero total weight leaves the model unchanged. Each peer's array is added in place
    (``add_`` with ``alpha``: no float64 copy per peer), which on a complete graph of 36 devices
    halves the round; the peers' arrays are the codec's read-only views and are only read.
    """
    total = own_weight + sum(w for _, w in peers)
    if not peers or total <= 0:
        return
    keep = None if names is None else set(names)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for name, p in model.named_parameters():
            if keep is not None and name not in keep:
                continue
            acc = p.detach().double() * own_weight
            for tensors, w in peers:
                acc.add_(torch.from_numpy(np.asarray(tensors[name])), alpha=w)
            p.copy_((acc / total).to(p.dtype))
