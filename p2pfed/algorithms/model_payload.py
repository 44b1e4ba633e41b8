"""Whole-model payloads, shared by the methods that exchange full models (gossip, FedProx, …)."""

from __future__ import annotations

import numpy as np
from torch import nn

from p2pfed.algorithms.base import Payload, expect_array


def model_payload(model: nn.Module, num_samples: int, **meta: object) -> Payload:
    """The model's parameters as float32 arrays, with the sample count used to weight averages."""
    tensors = {name: p.detach().cpu().numpy().astype(np.float32, copy=True)
               for name, p in model.named_parameters()}
    return Payload(meta={"num_samples": int(num_samples), **meta}, tensors=tensors)


def model_tensors(model: nn.Module, payload: Payload) -> dict[str, np.ndarray]:
    """The payload's parameters, checked name by name against the local model's shapes."""
    return {name: expect_array(payload, name, tuple(p.shape))
            for name, p in model.named_parameters()}
