"""Energy-aware gossip: gossip averaging that shares less when its battery runs low.

With more than ``low_j`` joules left a device sends its model at every step, as gossip-avg does;
below that it sends only in rounds divisible by ``low_every`` (it still trains and averages what
arrives), so a device on a radio that costs stays up longer. The battery is read through
``ctx.energy_left()``: None when the scenario gives no battery, and then this is gossip-avg.
An energy policy is a method's choice, written against p2pfed's interface only
(docs/writing-a-method.md): ``algorithm.name: energy_aware_gossip.py:EnergyAwareGossip``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from p2pfed.algorithms import Payload
from p2pfed.algorithms.averaging.gossip_avg import GossipAvg, GossipAvgOptions


class EnergyAwareOptions(GossipAvgOptions):
    low_j: float = Field(50.0, ge=0, description="below this many joules left, share less")
    low_every: int = Field(4, ge=1, description="when low, share only in rounds divisible by this")


class EnergyAwareGossip(GossipAvg[EnergyAwareOptions]):
    name = "energy-aware-gossip"
    steps = low = quiet = 0   # steps taken, of them with the battery low, of them without sending

    def share(self, round: int) -> Payload | None:
        left = self.ctx.energy_left()
        self.steps += 1
        if left is not None and left < self.options.low_j:
            self.low += 1
            if round % self.options.low_every:
                self.quiet += 1
                return None
        return super().share(round)

    def stats(self) -> dict[str, Any]:
        """The policy seen acting: the share of steps taken low, and of steps it kept quiet."""
        steps = max(self.steps, 1)
        return {**super().stats(), "low_steps_fraction": self.low / steps, "quiet_steps_fraction": self.quiet / steps}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "policy_counts": [self.steps, self.low, self.quiet]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.steps, self.low, self.quiet = (int(n) for n in state["policy_counts"])
