"""What a FedSub device needs in memory, declared for the run's memory checks
(``algorithms/memory.py``): the pre-run check's K-sweep term and the footprint estimate's bytes
per device."""

from __future__ import annotations

from typing import Protocol, cast

from p2pfed.algorithms.base import BaseOptions
from p2pfed.algorithms.memory import DeviceFacts, MemoryFacts, MemoryTerm

KMEANS_MIN_K = 2      # the K sweep starts at 2 clusters (clustering.choose_k_by_dbi_many)
FLOAT64_BYTES = 8
# Per device, whatever the model's size: its clustering cache's share, its per-class records of
# each peer's artifacts and their Python objects. Calibrated on bench/scale.py's small-model runs
# while a round's K sweeps still ran in one stack and set their peak; with the sweeps in chunks
# it is on the safe side (bench/results/scale/goal-100000/).
CLUSTERING_BYTES = 200_000


class _Restarts(Protocol):
    kmeans_n_init: int   # FedSub's option: K-means restarts per K


class FedSubMemory:
    """FedSub's answers to ``Algorithm.memory_terms`` and ``Algorithm.device_bytes``."""

    @classmethod
    def memory_terms(cls, options: BaseOptions, facts: MemoryFacts) -> list[MemoryTerm]:
        """The K-means restarts of a K sweep run as one batch: at least ``KMEANS_MIN_K`` centres
        of the prototypes' width (the model's last hidden width) each."""
        restarts, dim = cast(_Restarts, options).kmeans_n_init, facts.hidden[-1]
        return [MemoryTerm("algorithm.kmeans_n_init", restarts * KMEANS_MIN_K * dim * FLOAT64_BYTES,
                           f"{restarts:.3g} K-means restarts × {KMEANS_MIN_K} centres × {dim} dimensions "
                           f"× {FLOAT64_BYTES} bytes")]

    @classmethod
    def device_bytes(cls, options: BaseOptions, facts: DeviceFacts) -> float:
        """Its model and its own artifacts' copy; per message held (its own share, the one its
        neighbours cached, the next arriving: each decoded once for all its receivers) the
        encoded share, which a fusion reads in place (``SomeRows``); and its clustering and
        per-class records (``CLUSTERING_BYTES``)."""
        return 2 * facts.model_bytes + 3 * facts.message_bytes + CLUSTERING_BYTES
