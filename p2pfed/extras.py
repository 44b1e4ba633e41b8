"""Optional parts: what only one command or one method needs is installed as an extra of p2pfed,
and a missing one is named in one line with the command that installs it.

The extras (setup.cfg): ``sweeps`` (Dask, for ``p2pfed sweep``), ``tensorboard`` (``--log
tensorboard:DIR``), ``smote`` (imbalanced-learn, for FedHome's class balancing); ``test`` pulls
them all.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType


class MissingExtra(ValueError):
    """An optional package is not installed; the message names the extra that installs it."""


@dataclass(frozen=True)
class Requirement:
    """An optional package something needs: the module imported, its name on PyPI, and the
    extra of p2pfed that installs it."""

    module: str    # e.g. "imblearn.over_sampling"
    package: str   # e.g. "imbalanced-learn"
    extra: str     # e.g. "smote"

    def installed(self) -> bool:
        """Whether it is there, found without importing it (a check before a run stays light)."""
        try:
            return importlib.util.find_spec(self.module.partition(".")[0]) is not None
        except (ImportError, ValueError):
            return False

    def message(self, needed_by: str) -> str:
        """The one line saying what is missing, e.g. "p2pfed sweep needs Dask: pip install 'p2pfed[sweeps]'"."""
        return f"{needed_by} needs {self.package}: pip install 'p2pfed[{self.extra}]'"

    def load(self, needed_by: str) -> ModuleType:
        """The module, imported; ``MissingExtra`` (``message``) if it cannot be."""
        try:
            return importlib.import_module(self.module)
        except ImportError:
            raise MissingExtra(self.message(needed_by)) from None


def require(module: str, *, extra: str, package: str, needed_by: str) -> ModuleType:
    """``module``, imported; if it cannot be, ``MissingExtra`` naming the extra (``Requirement``)."""
    return Requirement(module, package, extra).load(needed_by)
