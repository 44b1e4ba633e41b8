"""``local``: every device trains on its own data and never communicates (lower baseline)."""

from __future__ import annotations

from p2pfed.algorithms.base import Algorithm
from p2pfed.algorithms.registry import register


@register
class Local(Algorithm):
    name = "local"
    message_kind = "local/none"
