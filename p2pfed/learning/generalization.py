"""The test data a device's generalization is measured on: every *other* device's test split.

FedAli (Ek et al., Sec. 2 and 5.1) scores each client model twice: on its own test set
(personalization) and on the test data of the other clients (generalization, a user-centric
view: a personal model should still cope when its user's data drifts toward another's). The
pool is built once per runtime and each device gets its complement on demand, so memory stays
one copy of the test data whatever the number of devices.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


class PooledTestData:
    """All devices' test splits stacked, with the owner of every row."""

    def __init__(self, device_ids: Sequence[int], x_tests: Sequence[np.ndarray],
                 y_tests: Sequence[np.ndarray]) -> None:
        self.x = torch.as_tensor(np.concatenate([np.asarray(x, dtype=np.float32) for x in x_tests]))
        self.y = torch.as_tensor(np.concatenate([np.asarray(y, dtype=np.int64) for y in y_tests]))
        self.owner = torch.as_tensor(np.concatenate([np.full(len(y), int(d), dtype=np.int64)
                                                     for d, y in zip(device_ids, y_tests)]))

    def others(self, device_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The test rows of every device but ``device_id`` (features, labels)."""
        keep = self.owner != int(device_id)
        return self.x[keep], self.y[keep]
