"""Atomic checkpoints of a run's state (a simulation's, or one real peer's), read back safely.

A checkpoint is written to a temporary file and moved over the old one (``p2pfed.atomic``), so a
kill at any moment leaves either the previous checkpoint or the new one, never half a file. It
holds only tensors, numbers, strings, lists and dicts — what ``state_dict`` methods return — and
is read back with ``torch.load(weights_only=True)``: no arbitrary objects, ever. A fingerprint
(the fully resolved scenario, and the peer) ties it to the run that wrote it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch

from p2pfed.atomic import atomic_path

FORMAT = 2


class CheckpointError(ValueError):
    """A checkpoint that cannot be read, or belongs to another run (names the file)."""


def save_checkpoint(path: Path, kind: str, fingerprint: str, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically, flushed to the disk before it replaces the old one."""
    with atomic_path(path, durable=True) as tmp:
        torch.save({"format": FORMAT, "kind": kind, "fingerprint": fingerprint, "state": state}, tmp)


def load_checkpoint(path: Path, kind: str, fingerprint: str) -> dict[str, Any]:
    """The state saved at ``path`` by the same kind of run with the same fingerprint."""
    try:
        saved = torch.load(path, weights_only=True)
    except Exception as exc:  # torch raises several types for damaged files
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT or saved.get("kind") != kind:
        raise CheckpointError(f"{path}: not a p2pfed {kind} checkpoint (format {FORMAT})")
    if saved["fingerprint"] != fingerprint:
        raise CheckpointError(f"{path}: written for another scenario or configuration; "
                              "move it away to start afresh")
    return cast("dict[str, Any]", saved["state"])
