"""Model payloads and their weighted average, shared by every method that exchanges weights.

Gossip averaging, FedProx, Ditto, FedHome and FedCLAR send the whole model; FedPer, FedRep and
ProtoHAR send only the body. All of them build, check and average payloads here, so the only
difference between them is which parameter names they pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from torch import nn

from p2pfed.algorithms.base import ArtifactError, Payload, expect_array
from p2pfed.learning.batched_fusion import FusionJob, weighted_mean_job


def model_payload(model: nn.Module, num_samples: int, names: Iterable[str] | None = None,
                  **meta: object) -> Payload:
    """The named parameters (all by default) as float32 arrays, with the sample count that
    weights the receivers' averages."""
    keep = None if names is None else set(names)
    tensors = {name: p.detach().cpu().numpy().astype(np.float32, copy=True)
               for name, p in model.named_parameters() if keep is None or name in keep}
    return Payload(meta={"num_samples": int(num_samples), **meta}, tensors=tensors)


def parameter_shapes(model: nn.Module, names: Iterable[str] | None = None) -> dict[str, tuple[int, ...]]:
    """The named parameters' (all by default) shapes, in the model's order."""
    keep = None if names is None else set(names)
    return {name: tuple(p.shape) for name, p in model.named_parameters() if keep is None or name in keep}


def checked_tensors(payload: Payload, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The payload's parameters, checked name by name against ``shapes`` (the local model's)."""
    return {name: expect_array(payload, name, shape) for name, shape in shapes.items()}


def model_tensors(model: nn.Module, payload: Payload,
                  names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The payload's parameters, checked name by name against the local model's shapes."""
    return checked_tensors(payload, parameter_shapes(model, names))


def sample_count(payload: Payload) -> int:
    """The sender's training-set size from the meta, checked."""
    n = payload.meta.get("num_samples")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ArtifactError(f"meta 'num_samples' must be an int >= 0, got {n!r}")
    return n


def averaging_job(model: nn.Module, own_weight: float,
                  peers: Sequence[tuple[dict[str, np.ndarray], float]],
                  names: Iterable[str] | None = None) -> FusionJob | None:
    """Replacing the named parameters by the weighted mean of the model's own and the peers', as
    a job (float64 sums; the peers' arrays are the codec's read-only views and are only read).
    None when there is nothing to average (no peers or a zero total weight)."""
    keep = None if names is None else set(names)
    targets = {name: p.detach() for name, p in model.named_parameters() if keep is None or name in keep}
    return weighted_mean_job(targets, own_weight, peers)


def average_into(model: nn.Module, own_weight: float,
                 peers: Sequence[tuple[dict[str, np.ndarray], float]],
                 names: Iterable[str] | None = None) -> None:
    """``averaging_job`` run at once."""
    job = averaging_job(model, own_weight, peers, names)
    if job is not None:
        job.run()
