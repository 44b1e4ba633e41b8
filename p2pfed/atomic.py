"""Files written whole or not at all: results, checkpoints, sweep manifests, control files.

Each is written to a temporary file in the same folder and moved over the old one with
``os.replace``, so a crash or a kill at any moment leaves either the previous file or the new
one, never half a file, and a reader never sees one being written.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: Path, *, durable: bool = False) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix) to write to; it replaces ``path`` only if
    the block finishes, and is removed otherwise. ``durable``: flush the new file to the disk
    before it replaces the old one (for a checkpoint that must survive a power cut)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        if durable:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_text_atomically(path: Path, text: str) -> None:
    """``text`` (UTF-8) into ``path``, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
