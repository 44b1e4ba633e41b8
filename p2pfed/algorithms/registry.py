"""Methods by name: the ones shipped (registered with ``@register``), those an installed package
declares in the ``p2pfed.algorithms`` entry-point group, and a user's class named in a scenario
as ``module:Class`` or ``path/to/file.py:Class`` (``p2pfed.plugins``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from p2pfed.algorithms.base import Algorithm
from p2pfed.plugins import PluginError, entry_point, entry_point_names, is_plugin_name, load_object

ENTRY_POINTS = "p2pfed.algorithms"
ALGORITHMS: dict[str, type[Algorithm]] = {}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: make a shipped method available by its ``name``."""
    if cls.name in ALGORITHMS:
        raise ValueError(f"algorithm {cls.name!r} registered twice")
    ALGORITHMS[cls.name] = cls
    return cls


def algorithm_class(name: str, search: Sequence[Path] = ()) -> type[Algorithm]:
    """The method called ``name``; ``search``: the folders a user's file is looked for in (the
    scenario's). An unknown name is a ValueError listing the valid ones."""
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if is_plugin_name(name):
        return _checked(load_object(name, search, what="algorithm.name"), name)
    found = entry_point(ENTRY_POINTS, name)
    if found is not None:
        return _checked(found, name)
    installed = entry_point_names(ENTRY_POINTS)
    raise ValueError(f"unknown algorithm {name!r}; choose one of: {', '.join(sorted(ALGORITHMS))}"
                     + (f", or an installed one: {', '.join(installed)}" if installed else "")
                     + "; or name your own class as module:Class or path/to/file.py:Class")


def _checked(obj: object, name: str) -> type[Algorithm]:
    if not (isinstance(obj, type) and issubclass(obj, Algorithm)):
        raise PluginError(f"algorithm.name: {name!r} is not a subclass of p2pfed.algorithms.Algorithm")
    if not getattr(obj, "name", None):
        obj.name = name   # a user's class need not name itself: the scenario does
    return obj
