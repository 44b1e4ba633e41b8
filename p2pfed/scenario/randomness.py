"""The named random streams of a run, all derived from the scenario seed.

Every consumer of randomness asks for its own stream by name (with an index where there is one
per device), in the spirit of networkx's ``py_random_state``: streams are independent of each
other and of the number of devices, so adding a consumer, or a device, never shifts another
stream's numbers, and no two files have to agree on child indices. Same seed, same numbers.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

STREAMS = (
    "data-split",       # train/test splits and synthetic data
    "model-init",       # the initial weights every device starts from
    "device",           # per device: its training order, noise, SMOTE draws (index: device id)
    "device-model",     # per device: its model's own randomness while training, e.g. dropout
    "graph",            # random topologies
    "contacts",         # mobility and pairwise contact processes
    "churn",            # devices going offline and back
    "participation",    # which devices take part in a synchronous round
    "device-clocks",    # when each device first trains under contacts, and its jitter
    "peer-clock",       # a real peer's own step jitter over contacts (one stream per peer)
    "class-schedule",   # dynamic data: which classes are hidden and when they return
    "adversaries",      # which devices lie (adversaries[].fraction)
    "attack",           # per adversary: its attack's own noise (index: device id)
    "device-profiles",  # which device class each device is (devices.profiles fractions)
    "shards",           # the tie-breaks of the graph partition a split run uses (engine.shards)
)


def seed_sequence(seed: int, name: str, *index: int) -> np.random.SeedSequence:
    """The seed sequence of stream ``name`` (and ``index``) of a run seeded with ``seed``."""
    if name not in STREAMS:
        raise ValueError(f"unknown random stream {name!r}; known: {', '.join(STREAMS)}")
    return np.random.SeedSequence(seed, spawn_key=(zlib.crc32(name.encode()), *index))


def stream(seed: int, name: str, *index: int) -> np.random.Generator:
    """A numpy generator for stream ``name``."""
    return np.random.default_rng(seed_sequence(seed, name, *index))


def int_seed(seed: int, name: str, *index: int) -> int:
    """A 32-bit integer seed for stream ``name``, for libraries that take one (networkx, torch)."""
    return int(seed_sequence(seed, name, *index).generate_state(1)[0])


def torch_stream(seed: int, name: str, *index: int) -> torch.Generator:
    """A torch generator for stream ``name``."""
    return torch.Generator().manual_seed(int_seed(seed, name, *index))
