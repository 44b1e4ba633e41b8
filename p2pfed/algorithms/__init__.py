"""Federated methods behind one small interface (``base.Algorithm``, eight hooks).

One package per method family: ``averaging`` (gossip averaging and the baselines built on it),
``fedsub``, ``safl``, ``fedali``, ``fedpews``; ``local`` trains alone. Importing this package
registers every shipped method, so scenario names resolve; a user's own method is named in a
scenario as ``module:Class`` (``registry``).
"""

from p2pfed.algorithms.base import (NOT_READY, Algorithm, ArtifactError, ComputeNow, Deferred, DeviceContext,
                                    FusionWork, Future, NotReady, Offload, Options, RunFacts, TrainingWork,
                                    expect_array, run_facts)
from p2pfed.algorithms.memory import MemoryFacts, MemoryTerm
from p2pfed.algorithms.payloads import Payload, Received
from p2pfed.algorithms.registry import ALGORITHMS, algorithm_class, register
from p2pfed.learning.batched_fusion import FusionJob
from p2pfed.learning.batched_training import TrainingJob
from p2pfed.algorithms import averaging, fedali, fedpews, fedsub, local, safl  # noqa: F401,E402  (registration)

__all__ = ["ALGORITHMS", "Algorithm", "ArtifactError", "ComputeNow", "Deferred", "DeviceContext", "FusionJob",
           "FusionWork", "Future", "MemoryFacts", "MemoryTerm", "NOT_READY", "NotReady", "Offload", "Options",
           "Payload", "Received", "RunFacts", "TrainingJob", "TrainingWork", "algorithm_class", "expect_array",
           "register", "run_facts"]
