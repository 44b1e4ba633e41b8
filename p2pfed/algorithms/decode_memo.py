"""Work derived from a received array, done once for all the receivers of a broadcast.

The simulators hand every receiver of a broadcast the same decoded, read-only arrays
(``engine/delivery.py SharedDecoder``). What a method builds from them that depends only on the
arrays and the receiver's model shapes (FedSub's dense copy of a subnetwork) can then be built
once and shared. Each receiver still runs its own checks before asking; the results are shared
between receivers, so callers must not modify them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
KEPT = 128   # recent sources kept, as the shared decoder keeps recent broadcasts


class DecodeMemo:
    """Keyed by the identity of the source array and a signature of what else the work depends
    on; an entry holds the array, so its identity cannot be reused while it is cached."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._entries: OrderedDict[int, tuple[np.ndarray, Hashable, Any]] = OrderedDict()
        self.built = 0    # results built here
        self.shared = 0   # requests served from an earlier build

    def get(self, source: np.ndarray, signature: Hashable, build: Callable[[], T]) -> T:
        entry = self._entries.get(id(source))
        if entry is not None and entry[0] is source and entry[1] == signature:
            self._entries.move_to_end(id(source))
            self.shared += 1
            return entry[2]
        result = build()
        self.built += 1
        self._entries[id(source)] = (source, signature, result)
        self._entries.move_to_end(id(source))
        while len(self._entries) > self.kept:
            self._entries.popitem(last=False)
        return result
