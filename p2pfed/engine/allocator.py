"""The C allocator during a run: freed memory kept in the process for the next round.

A round allocates and frees the same large buffers over and over: stacked models and their
activations, encoded messages of a few hundred kilobytes. glibc's malloc serves a block above its
mmap threshold with a fresh mapping, unmapped when freed, and gives the top of its heap back to
the system once more than its trim threshold lies free there; each time, the kernel faults the
pages in again and zeroes them. With both thresholds raised, freed blocks stay in the heap and
the next round reuses them: the peak stays where the largest round puts it. When the run ends,
the free memory is returned (``malloc_trim``). Nothing a run computes depends on where its
memory came from: results are the same.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Iterator
from contextlib import contextmanager

M_TRIM_THRESHOLD = -1   # mallopt's parameter numbers (glibc's malloc.h)
M_MMAP_THRESHOLD = -3
KEPT_BYTES = 1 << 30    # blocks below this come from the heap; free memory up to it stays there


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has ``mallopt`` and ``malloc_trim``), else None; looked
    up once per process (``find_library`` may start a subprocess)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


@contextmanager
def freed_memory_kept(kept: int = KEPT_BYTES) -> Iterator[bool]:
    """Inside, blocks under ``kept`` bytes come from the heap and up to ``kept`` free bytes stay
    there; on leaving, the heap's free memory goes back to the system. Yields whether the
    allocator took the settings (False off glibc: nothing changes). The thresholds stay raised
    after the block (glibc cannot go back to its adaptive ones); only the memory is returned."""
    if not 0 < kept < 1 << 31:
        raise ValueError(f"kept must be between 1 and 2**31 - 1 bytes, got {kept}")
    libc = _glibc()
    taken = libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, kept)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, kept))
    try:
        yield taken
    finally:
        if libc is not None:
            libc.malloc_trim(0)
