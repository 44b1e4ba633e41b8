"""Federated methods, one file each, all behind ``Algorithm`` (see ``base``).

Importing this package registers every method, so scenario names resolve.
"""

from p2pfed.algorithms.base import (ALGORITHMS, Algorithm, ArtifactError, DeviceContext, LaterFusion, Options,
                                    Payload, Received, algorithm_class, prepare_fusions, register)
from p2pfed.algorithms import (  # noqa: F401  (registration)
    ditto, fedali, fedclar, fedhome, fedper, fedpews, fedprox, fedproto, fedrep, fedsub, gossip_avg, local,
    protohar, safl)

__all__ = ["ALGORITHMS", "Algorithm", "ArtifactError", "DeviceContext", "LaterFusion", "Options", "Payload",
           "Received", "algorithm_class", "prepare_fusions", "register"]
