"""The timing and rules of a contact run, as the scenario sets them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PROTOCOLS = ("ideal", "acknowledged")


@dataclass(frozen=True)
class AsyncSchedule:
    duration_s: float
    train_period_s: float
    eval_every_s: float
    train_jitter_s: float = 0.0
    send_policy: str = "smallest-first"
    max_age_s: float | None = None     # TTL of cached and carried artifacts
    loss_rate: float = 0.0             # chance that a fully sent message is lost
    batch_window_s: float = 0.0        # > 0: steps started in one window finish together at its end
    protocol: str = "ideal"            # "acknowledged": real peers' summary vectors and acknowledgements

    @property
    def evaluations(self) -> int:
        """How many evaluations the run makes (the last one at its end)."""
        return int(np.ceil(self.duration_s / self.eval_every_s - 1e-9))
