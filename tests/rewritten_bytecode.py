"""The test modules' assert-rewritten bytecode, written once before pytest-xdist's workers start.

pytest rewrites each test module's ``assert`` statements and caches the result beside the module
(``__pycache__/*-pytest-*.pyc``). In a fresh checkout no cache exists yet, and every worker, all
collecting the same modules in the same order at the same time, rewrote every one of them itself.
Writing the cache once in the process that starts the workers leaves them only to read it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _pytest.assertion import rewrite


def write_rewritten_bytecode(config: pytest.Config, folder: Path) -> int:
    """Rewrite and cache every test module in ``folder`` that has no valid cache; how many."""
    if sys.dont_write_bytecode or config.getoption("assertmode") != "rewrite":
        return 0
    state = config.stash[rewrite.assertstate_key]
    written = 0
    for module in sorted({m for pattern in config.getini("python_files") for m in folder.glob(pattern)}):
        cache_dir = rewrite.get_cache_dir(module)
        pyc = cache_dir / (module.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(module, pyc, state.trace) is not None:
            continue
        if not rewrite.try_makedirs(cache_dir):
            return written
        source_hash, code = rewrite._rewrite_test(module, config)
        written += rewrite._write_pyc(state, code, source_hash, pyc)
    return written
