"""Text files users supply (scenarios, peer files, edge lists, traces, ARFF): a binary or wrongly
encoded file is reported with the file and the first line that is not UTF-8.

Why: Python's ``UnicodeDecodeError`` names neither the file nor the line ('utf-8' codec can't
decode byte 0x80 in position 0), and streaming readers decode in chunks, so the line they had
reached is not the line at fault.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def undecodable_line(path: Path, opener: Callable[..., IO[bytes]] = open) -> int | None:
    """The 1-based number of the first line of ``path`` that is not UTF-8 (None: all are)."""
    with opener(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return None


def not_text(path: Path, what: str, opener: Callable[..., IO[bytes]] = open) -> str:
    """'path:line: not a text (UTF-8) <what>', for the error a reader raises."""
    try:
        line = undecodable_line(path, opener)
    except OSError:
        line = None
    return f"{path}{'' if line is None else f':{line}'}: not a text (UTF-8) {what}"


def read_text(path: Path, what: str, error: type[Exception] = ValueError) -> str:
    """The whole file as UTF-8 text; an unreadable or binary file raises ``error`` naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise error(not_text(path, what)) from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None


def read_json(path: Path, what: str, error: type[Exception] = ValueError) -> Any:
    """The JSON in ``path``; a missing, unreadable, binary or damaged (e.g. truncated) file
    raises ``error`` with one line naming it (a bare parser message names no file)."""
    if not path.exists():
        raise error(f"{path}: {what} not found")
    text = read_text(path, what, error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}:{exc.lineno}:{exc.colno}: the {what} is not valid JSON ({exc.msg}); "
                    "was it truncated while copied?") from None
