"""The averaging family: methods that average what their neighbours send — whole models
(gossip-avg, FedProx, Ditto, FedHome, FedCLAR), the shared body (FedPer, FedRep, ProtoHAR) or
class prototypes (FedProto, ProtoHAR) — the baselines the FedSub papers compare against."""

from p2pfed.algorithms.averaging import (  # noqa: F401  (registration)
    ditto, fedclar, fedhome, fedper, fedproto, fedprox, fedrep, gossip_avg, protohar)
