"""The C allocator during a run: a large freed block stays in the process for the next round, and
goes back to the system when the run ends."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from p2pfed.engine.allocator import _glibc, freed_memory_kept

# In a fresh process (a run in this one has already raised its thresholds for good): the resident
# set after a 64 MiB block is written and freed, by default, inside ``freed_memory_kept`` (twice:
# the second block reuses the first's memory) and after leaving it.
SCRIPT = """
import ctypes, json, os
from p2pfed.engine.allocator import _glibc, freed_memory_kept
libc, size = _glibc(), 64 << 20
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
def cycle():
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
    return resident()
out = {"start": resident(), "default": cycle()}
with freed_memory_kept() as taken:
    out["taken"] = taken
    out["kept"] = [cycle(), cycle()]
out["after"] = resident()
print(json.dumps(out))
"""


@pytest.mark.skipif(_glibc() is None, reason="glibc's malloc only")
def test_a_freed_block_stays_for_reuse_inside_and_is_returned_after():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    rss = json.loads(done.stdout)
    mib = 1 << 20
    assert rss["taken"]
    assert rss["default"] - rss["start"] < 8 * mib          # by default the block is unmapped when freed
    assert rss["kept"][0] - rss["start"] > 56 * mib         # inside, it stays
    assert rss["kept"][1] - rss["kept"][0] < 8 * mib        # and the next block reuses it
    assert rss["kept"][1] - rss["after"] > 56 * mib         # leaving gives it back


def test_kept_bytes_out_of_mallopts_range_are_refused():
    with pytest.raises(ValueError, match="kept must be between"), freed_memory_kept(kept=1 << 31):
        pass
