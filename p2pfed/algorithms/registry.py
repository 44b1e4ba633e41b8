"""Methods by name: the ones shipped (registered with ``@register``), those an installed package
declares in the ``p2pfed.algorithms`` entry-point group, and a user's class named in a scenario
as ``module:Class`` or ``path/to/file.py:Class`` (``p2pfed.plugins``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from p2pfed.algorithms.base import Algorithm
from p2pfed.algorithms.naming import check_names
from p2pfed.plugins import PluginError, entry_point, entry_point_names, is_plugin_name, load_object

ENTRY_POINTS = "p2pfed.algorithms"
ALGORITHMS: dict[str, type[Algorithm]] = {}
_RESOLVED: dict[str, type[Algorithm]] = {}   # the user's classes resolved in this process, by module:Class


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: make a shipped method available by its ``name``."""
    check_names(cls)
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
        _RESOLVED[name] = _checked(load_object(name, search, what="algorithm.name"), name)
        return _RESOLVED[name]
    found = entry_point(ENTRY_POINTS, name)
    if found is not None:
        return _checked(found, name)
    installed = entry_point_names(ENTRY_POINTS)
    raise ValueError(f"unknown algorithm {name!r}; choose one of: {', '.join(sorted(ALGORITHMS))}"
                     + (f", or an installed one: {', '.join(installed)}" if installed else "")
                     + "; or name your own class as module:Class or path/to/file.py:Class")


def method_label(name: str) -> str:
    """What results tables call the method a scenario names ``name``: for a user's class named by
    its file or module (``file.py:Class``, resolved in this process) the ``name`` it gives itself,
    not its path (the path and hash go into summary.json's ``code``); otherwise ``name`` itself
    (a shipped method, an installed package's entry point)."""
    cls = _RESOLVED.get(name)
    return name if cls is None else cls.name


def _checked(obj: object, name: str) -> type[Algorithm]:
    if not (isinstance(obj, type) and issubclass(obj, Algorithm)):
        raise PluginError(f"algorithm.name: {name!r} is not a subclass of p2pfed.algorithms.Algorithm")
    try:
        check_names(obj)
    except ValueError as exc:
        raise PluginError(f"algorithm.name: {name!r}: {exc}") from None
    return obj
