"""Files a bench script generates from committed results: written, or checked against what is
committed (``--check``, which the tests run so that a page never drifts from its data)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path


def with_block(text: str, begin: str, end: str, block: str) -> str:
    """``text`` with everything from the line ``begin`` to the line ``end`` (both included)
    replaced by ``block``, which starts with ``begin`` and ends with ``end`` itself."""
    start, stop = text.index(begin), text.index(end) + len(end)
    return text[:start] + block + text[stop:]


def write_or_check(wanted: Mapping[Path, str], check: bool, command: str) -> int:
    """Write each file's wanted text; with ``check``, write nothing and return 1 (naming the
    stale files and the ``command`` that remakes them) when a file differs."""
    if check:
        stale = [p.name for p, new in wanted.items() if not p.is_file() or p.read_text() != new]
        if stale:
            print(f"stale: {', '.join(stale)}: run {command}", file=sys.stderr)
            return 1
        return 0
    for path, new in wanted.items():
        path.write_text(new)
    return 0
