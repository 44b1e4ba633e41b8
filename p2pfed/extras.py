"""Optional parts: what only one command or one method needs is installed as an extra of p2pfed,
and a missing one is named in one line with the command that installs it.

The extras (setup.cfg): ``sweeps`` (Dask, for ``p2pfed sweep``), ``tensorboard`` (``--log
tensorboard:DIR``), ``smote`` (imbalanced-learn, for FedHome's class balancing); ``test`` pulls
them all.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ValueError):
    """An optional package is not installed; the message names the extra that installs it."""


def require(module: str, *, extra: str, package: str, needed_by: str) -> ModuleType:
    """``module``, imported; if it cannot be, ``MissingExtra`` saying e.g. "p2pfed sweep needs
    Dask: pip install 'p2pfed[sweeps]'"."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(f"{needed_by} needs {package}: pip install 'p2pfed[{extra}]'") from None
