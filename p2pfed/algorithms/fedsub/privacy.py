"""Noise on shared prototypes (FedSub journal Sec. 3.3): what leaves a device is perturbed.

Gaussian noise takes its standard deviation ``sigma`` directly. Laplace noise is the Laplace
mechanism: scale b = sensitivity / epsilon per coordinate. Prototypes are means of unbounded
features, so ``sensitivity`` is the user's stated bound on how much one sample can move a
prototype (L1); the epsilon is only a differential-privacy guarantee if that bound holds.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

NoiseKind = Literal["none", "gaussian", "laplace"]


def noise_std(kind: NoiseKind, *, sigma: float | None = None, epsilon: float | None = None,
              sensitivity: float = 1.0) -> float:
    """Per-coordinate standard deviation of the noise (Laplace: sqrt(2) * b)."""
    if kind == "none":
        return 0.0
    if kind == "gaussian":
        if sigma is None or sigma <= 0:
            raise ValueError(f"gaussian noise needs sigma > 0, got {sigma!r}")
        return float(sigma)
    if kind == "laplace":
        if epsilon is None or epsilon <= 0 or sensitivity <= 0:
            raise ValueError(f"laplace noise needs epsilon > 0 and sensitivity > 0, "
                             f"got {epsilon!r}, {sensitivity!r}")
        return float(np.sqrt(2.0) * sensitivity / epsilon)
    raise ValueError(f"unknown noise kind {kind!r}; choose none, gaussian or laplace")


def perturb(prototypes: np.ndarray, kind: NoiseKind, rng: np.random.Generator, *,
            sigma: float | None = None, epsilon: float | None = None,
            sensitivity: float = 1.0) -> np.ndarray:
    """A noisy copy of ``prototypes`` (float32); the input is left untouched."""
    std = noise_std(kind, sigma=sigma, epsilon=epsilon, sensitivity=sensitivity)
    x = np.asarray(prototypes, dtype=np.float32)
    if kind == "none":
        return x.copy()
    if kind == "gaussian":
        noise = rng.normal(0.0, std, size=x.shape)
    else:
        assert epsilon is not None   # noise_std checked it
        noise = rng.laplace(0.0, sensitivity / epsilon, size=x.shape)
    return (x + noise).astype(np.float32)
