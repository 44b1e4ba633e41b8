"""The averaging family: methods that average what their neighbours send — whole models
(gossip-avg, FedProx, Ditto, FedHome, FedCLAR), the shared body (FedPer, FedRep, ProtoHAR), the
global top layers (LG-FedAvg), all but the batch norms (FedBN) or class prototypes (FedProto,
ProtoHAR) — the baselines the FedSub and SAFL papers compare against."""

from p2pfed.algorithms.averaging import (  # noqa: F401  (registration)
    ditto, fedbn, fedclar, fedhome, fedper, fedproto, fedprox, fedrep, gossip_avg, lg_fedavg, protohar)
