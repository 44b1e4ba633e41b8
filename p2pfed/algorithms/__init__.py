"""Federated methods behind one small interface (``base.Algorithm``, eight hooks).

One package per method family: ``averaging`` (gossip averaging and the baselines built on it),
``fedsub``, ``safl``, ``fedali``, ``fedpews``; ``local`` trains alone. Importing this package
registers every shipped method, so scenario names resolve; a user's own method is named in a
scenario as ``module:Class`` (``registry``). Everything a method of a user's own imports is here
(``docs/writing-a-method.md``).
"""

from p2pfed.algorithms.base import (NOT_READY, Algorithm, ArtifactError, ComputeNow, Deferred, DeviceContext,
                                    FusionWork, Future, NotReady, Offload, Options, RunFacts, TrainingWork,
                                    UnitOptions, expect_array, require_units, run_facts)
from p2pfed.algorithms.attacker import Attacker, attack_class
from p2pfed.algorithms.memory import DeviceFacts, MemoryFacts, MemoryTerm
from p2pfed.algorithms.model_payload import averaging_job, checked_tensors, model_payload, parameter_shapes
from p2pfed.algorithms.payloads import Payload, Received
from p2pfed.algorithms.registry import ALGORITHMS, algorithm_class, method_label, register
from p2pfed.learning.batched_fusion import FusionJob
from p2pfed.learning.batched_training import TrainingJob
from p2pfed.algorithms import averaging, fedali, fedpews, fedsub, local, safl  # noqa: F401,E402  (registration)

__all__ = ["ALGORITHMS", "Algorithm", "ArtifactError", "Attacker", "ComputeNow", "Deferred", "DeviceContext",
           "DeviceFacts", "FusionJob", "FusionWork", "Future", "MemoryFacts", "MemoryTerm", "NOT_READY", "NotReady",
           "Offload", "Options", "Payload", "Received", "RunFacts", "TrainingJob", "TrainingWork", "UnitOptions",
           "algorithm_class", "attack_class", "averaging_job", "checked_tensors", "expect_array", "method_label",
           "model_payload", "parameter_shapes", "register", "require_units", "run_facts"]
