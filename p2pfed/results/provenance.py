"""Which code made a result: the package version and, in a git checkout, the commit.

Every ``summary.json`` carries it under ``code`` so that a folder of results (a sweep resumed
over days, cells copied from another machine) can say whether all of them came from one version
of the code; ``p2pfed report`` warns when they did not.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

from p2pfed._version import __version__

PACKAGE_DIR = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """``{"p2pfed": version, "git_commit": sha or None, "git_dirty": bool or None}``.

    ``git_dirty`` is true when tracked files of the package differ from the commit. Outside a git
    checkout (an installed wheel) or without git, both git fields are None. Asked once per process.
    """
    return {"p2pfed": __version__, **_git_state(PACKAGE_DIR)}


def _git_state(where: Path) -> dict[str, Any]:
    unknown = {"git_commit": None, "git_dirty": None}
    try:
        commit = _git(where, "rev-parse", "HEAD")
        dirty = _git(where, "status", "--porcelain", "--untracked-files=no", "--", str(where))
    except (OSError, subprocess.SubprocessError):
        return unknown
    if commit is None or dirty is None:
        return unknown
    return {"git_commit": commit, "git_dirty": bool(dirty)}


def _git(where: Path, *args: str) -> str | None:
    done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10)
    return done.stdout.strip() if done.returncode == 0 else None


def describe(code: dict[str, Any] | None) -> str:
    """One short label for a ``code`` record: ``0.1.0 @ 1a2b3c4d (+ changes)``, or ``unknown``."""
    if not code:
        return "unknown"
    commit = code.get("git_commit")
    label = f"{code.get('p2pfed', '?')} @ {commit[:8]}" if commit else str(code.get("p2pfed", "?"))
    return label + (" (+ uncommitted changes)" if code.get("git_dirty") else "")
