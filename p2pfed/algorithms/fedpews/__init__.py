"""FedPeWS and FedPeWS-Fixed without a server: a personalised warmup on neuron subnetworks.

``method`` holds both methods; ``neuron_masks`` the masks, their sampling and masked training."""

from p2pfed.algorithms.fedpews import method  # noqa: F401  (registration)
