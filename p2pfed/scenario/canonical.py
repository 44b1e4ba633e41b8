"""A resolved scenario's canonical form: the fields that differ from their defaults.

What a run's identity is computed from (a sweep cell's key): a field that joins the schema at
its default, in a section or in an entry of a list of sections (``adversaries``,
``devices.profiles``), or an option that joins a method at its default, leaves the form
unchanged, so results written before it was added are still found.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from p2pfed.algorithms import Algorithm
from p2pfed.scenario.schema import Scenario


@dataclass(frozen=True)
class _Entries:
    """The defaults of each entry of a list of sections."""

    defaults: dict[str, Any]


_ABSENT = object()


def canonical(resolved: dict[str, Any], method: type[Algorithm]) -> dict[str, Any]:
    """``resolved`` (``loader.dump``, or an earlier run's ``summary.json`` ``config``) as the
    fields that differ from the schema's defaults and the options that differ from ``method``'s,
    sorted; ``algorithm.name`` always."""
    try:
        options = method.Options().model_dump()
    except ValidationError:   # options without defaults: every one counts
        options = {}
    defaults = {**_schema_defaults(), "algorithm": {**options, "name": _ABSENT}}
    return differences(resolved, defaults)


@functools.cache
def _schema_defaults() -> dict[str, Any]:
    """The schema's defaults, as ``differences`` reads them (built once: a sweep asks per cell)."""
    return _defaults(Scenario, Scenario().model_dump())


def differences(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that differ from ``defaults``, sections compared key by key."""
    out: dict[str, Any] = {}
    for key in sorted(data):
        value, default = data[key], defaults.get(key, _ABSENT)
        if isinstance(default, _Entries) and isinstance(value, list):
            if value:
                out[key] = [differences(v, default.defaults) if isinstance(v, dict) else v for v in value]
        elif isinstance(value, dict) and isinstance(default, dict):
            if inner := differences(value, default):
                out[key] = inner
        elif default is _ABSENT or value != default:
            out[key] = value
    return out


def _defaults(model: type[BaseModel], dumped: dict[str, Any]) -> dict[str, Any]:
    """``dumped`` (a default ``model``'s fields) with each list of sections as ``_Entries``."""
    out = dict(dumped)
    for name, field in model.model_fields.items():
        if (entry := _entry_model(field.annotation)) is not None:
            out[name] = _Entries(_defaults(entry, {n: _plain(f.get_default(call_default_factory=True))
                                                   for n, f in entry.model_fields.items() if not f.is_required()}))
        elif (section := _model(field.annotation)) is not None and isinstance(dumped.get(name), dict):
            out[name] = _defaults(section, dumped[name])
    return out


def _plain(value: Any) -> Any:
    return value.model_dump() if isinstance(value, BaseModel) else value


def _model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        found = [m for a in typing.get_args(annotation) if (m := _model(a)) is not None]
        return found[0] if len(found) == 1 else None
    return None


def _entry_model(annotation: Any) -> type[BaseModel] | None:
    """The section type of a ``list[Section]`` field."""
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation) or (None,)
        return _model(item)
    return None
