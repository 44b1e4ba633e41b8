"""``fedbn``: every parameter is averaged with the neighbours but the batch-norm layers', which
stay on the device with their running statistics.

Follows FedBN (X. Li, M. Jiang, X. Zhang, M. Kamp and Q. Dou, "FedBN: Federated Learning on
Non-IID Features via Local Batch Normalization", ICLR 2021): local batch normalization
alleviates the feature shift before the models are averaged; as the authors' code does
(``federated/fed_digits.py``), a batch-norm layer's scale, shift and running statistics are
left out of the average and everything else is averaged. Serverless, the average is over the
neighbourhood as in ``gossip-avg``; only the averaged parameters are sent (running statistics
are buffers, which no averaging method sends).

It is meant for a model with batch norm (``model.name: cnn``); on one without (the MLP) nothing
is kept local and it averages as ``gossip-avg`` does: ``algorithm_stats``' ``bn_parameter_fraction``
says which it was.
"""

from __future__ import annotations

from torch import nn
from typing_extensions import TypeVar

from p2pfed.algorithms.averaging.gossip_avg import GossipAvgOptions
from p2pfed.algorithms.averaging.split_gossip import SplitGossip
from p2pfed.algorithms.registry import register


class FedBNOptions(GossipAvgOptions):
    """FedBN's options: how the shared parameters are combined (``RobustOptions``)."""


def batch_norm_names(model: nn.Module) -> list[str]:
    """Parameter names of the model's batch-norm layers (scales and shifts)."""
    return [f"{prefix}.{name}" if prefix else name
            for prefix, module in model.named_modules() if isinstance(module, nn.modules.batchnorm._BatchNorm)
            for name, _ in module.named_parameters(recurse=False)]


FedBNOptionsT = TypeVar("FedBNOptionsT", bound=FedBNOptions, default=FedBNOptions, covariant=True)


@register
class FedBN(SplitGossip[FedBNOptionsT]):
    name = "fedbn"
    message_kind = "fedbn/model"
    labels = ("non_bn", "bn")

    def split(self) -> tuple[list[str], list[str]]:
        local = set(batch_norm_names(self.ctx.model))
        names = [n for n, _ in self.ctx.model.named_parameters()]
        return [n for n in names if n not in local], [n for n in names if n in local]
