"""p2pfed: decentralized, personalized federated learning without a server.

The Python API (``p2pfed.api``) is importable from here: ``p2pfed.run``, ``p2pfed.compare``,
``p2pfed.sweep``, ``p2pfed.load`` and ``p2pfed.Run``; loaded on first use, so ``import p2pfed``
stays light.
"""

from typing import Any

from p2pfed._version import __version__ as __version__
__all__ = ["Run", "compare", "load", "run", "sweep"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from p2pfed import api

        return getattr(api, name)
    raise AttributeError(f"module 'p2pfed' has no attribute {name!r}")
