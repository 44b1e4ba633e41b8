"""What the schema says about each field, in words: its type, allowed values, bounds, default
and description, read from the pydantic models themselves.

One source for the reference page (``p2pfed.docs_gen``) and ``p2pfed explain``: a field's
description is written once, in the model, and nowhere else. Generic over any section model
(scenario, peer file, sweep file); the scenario's method options are named
``algorithm.<method>.<option>``.
"""

from __future__ import annotations

import difflib
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from p2pfed.algorithms import ALGORITHMS
from p2pfed.scenario.schema import Scenario

METHODS_PREFIX = "algorithm"


@dataclass(frozen=True)
class FieldDoc:
    """One field as a reader needs it; ``section`` is the model of a field that holds a section
    (a section, a list of entries, or a union with one), None for a plain value."""

    path: str
    type_name: str
    allowed: tuple[str, ...]
    bounds: str
    default: str
    description: str
    section: type[BaseModel] | None = None
    nested: bool = False   # the field is a section on its own (not a value that may hold one)


def yaml_text(value: Any) -> str:
    """``value`` as a YAML file writes it (flow style)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(yaml_text, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def section_models(annotation: Any) -> list[type[BaseModel]]:
    """The section models an annotation holds (itself, a list's items, a union's members)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in section_models(arg)]


def type_text(annotation: Any) -> tuple[str, tuple[str, ...]]:
    """(the type in words, a Literal's values) of an annotation."""
    origin = typing.get_origin(annotation)
    if annotation is type(None):
        return "null", ()
    if origin is Literal:
        values = typing.get_args(annotation)
        kind = "string" if all(isinstance(v, str) for v in values) else "int"
        return kind, tuple(yaml_text(v) for v in values)
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        parts = [type_text(arg) for arg in typing.get_args(annotation)]
        words = list(dict.fromkeys(p[0] for p in parts if p[0] != "null"))
        words += ["null"] if any(p[0] == "null" for p in parts) else []
        return " or ".join(words), tuple(dict.fromkeys(v for p in parts for v in p[1]))
    if origin in (list, tuple):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        item, values = type_text(args[0]) if args else ("any", ())
        listed = "entries" if item == "section" else f"({item})" if " or " in item else item
        return f"list of {listed}", values
    if origin is dict:
        return "mapping", ()
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section", ()
    names = {int: "int", float: "float", bool: "bool", str: "string"}
    return names.get(annotation, "any"), ()


def bounds_text(info: FieldInfo) -> str:
    """A field's numeric bounds and length limits, e.g. ``0 ≤ x < 1``, ``2 items``."""
    low = high = ""
    sizes: dict[str, int] = {}
    for m in info.metadata:
        if isinstance(m, at.Ge):
            low = f"{m.ge!r} ≤ x"
        elif isinstance(m, at.Gt):
            low = f"{m.gt!r} < x"
        elif isinstance(m, at.Le):
            high = f"≤ {m.le!r}"
        elif isinstance(m, at.Lt):
            high = f"< {m.lt!r}"
        elif isinstance(m, at.MinLen):
            sizes["min"] = m.min_length
        elif isinstance(m, at.MaxLen):
            sizes["max"] = m.max_length
    if low and high:
        text = f"{low} {high}"
    elif low:
        text = ("≥ " if "≤" in low else "> ") + low.split(" ")[0]
    else:
        text = high
    if sizes:
        lo, hi = sizes.get("min", 0), sizes.get("max")
        unit = "characters" if info.annotation is str else "items"
        count = (f"exactly {lo} {unit}" if lo == hi else "not empty" if lo == 1 and hi is None
                 else f"at least {lo} {unit}" if hi is None else f"{lo} to {hi} {unit}")
        text = f"{text}; {count}" if text else count
    return text


def default_text(info: FieldInfo) -> str:
    """The default as YAML, ``required`` when there is none, empty for a whole section."""
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    return "" if isinstance(value, BaseModel) else yaml_text(value)


def field_doc(path: str, info: FieldInfo) -> FieldDoc:
    kind, allowed = type_text(info.annotation)
    models = section_models(info.annotation)
    nested = isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
    return FieldDoc(path, kind, allowed, bounds_text(info), default_text(info), info.description or "",
                    models[0] if models else None, nested)


def model_fields(model: type[BaseModel], prefix: str = "") -> list[FieldDoc]:
    """The fields a model declares, in order, each named ``prefix`` + its key (an alias if it has one)."""
    return [field_doc(f"{prefix}{info.alias or name}", info) for name, info in model.model_fields.items()]


def walk(model: type[BaseModel], prefix: str = "") -> Iterator[FieldDoc]:
    """Every field of a model and of the sections it holds, depth first."""
    for doc in model_fields(model, prefix):
        yield doc
        if doc.section is not None:
            yield from walk(doc.section, f"{doc.path}.")


def method_options(method: str) -> list[FieldDoc]:
    """A shipped method's options, named ``algorithm.<method>.<option>``: its own first, then
    those it inherits (the robust combination many methods share)."""
    options = ALGORITHMS[method].Options
    mro = options.__mro__

    def nearest(doc: FieldDoc) -> int:
        key = doc.path.rsplit(".", 1)[-1]
        return next(i for i, c in enumerate(mro) if key in getattr(c, "__annotations__", {}))
    return sorted(model_fields(options, f"{METHODS_PREFIX}.{method}."), key=nearest)


def scenario_fields() -> dict[str, FieldDoc]:
    """Every scenario field by its dotted path, the shipped methods' options included."""
    docs = {doc.path: doc for doc in walk(Scenario)}
    for method in sorted(ALGORITHMS):
        docs.update((doc.path, doc) for doc in method_options(method))
    return docs


class UnknownField(LookupError):
    """A dotted name that is no scenario field or section; ``matches`` are the closest names."""

    def __init__(self, name: str, matches: list[str]) -> None:
        self.name, self.matches = name, matches
        hint = f"; did you mean {', '.join(matches)}?" if matches else \
            "; a field is named by its section, e.g. contacts.protocol or algorithm.fedsub.extraction"
        super().__init__(f"unknown scenario field {name!r}{hint}")


def explained(name: str) -> list[FieldDoc]:
    """The fields ``name`` means: one field; a section's fields; or ``algorithm.<option>``, that
    option in every shipped method that has it. UnknownField with the closest names otherwise."""
    docs = scenario_fields()
    sections = {d.path.rsplit(".", 1)[0] for d in docs.values() if "." in d.path}
    found = [docs[name]] if name in docs else []
    if name in sections:
        found += [d for path, d in docs.items() if "." in path and path.rsplit(".", 1)[0] == name]
    head, _, option = name.partition(".")
    if not found and head == METHODS_PREFIX and "." not in option:
        found = _in_every_method(option)
    if found:
        return found
    names = [*docs, *sections]
    raise UnknownField(name, difflib.get_close_matches(name, names, n=3, cutoff=0.6))


def _in_every_method(option: str) -> list[FieldDoc]:
    """``option`` in every shipped method that has it, one entry per distinct meaning, its path
    naming the methods that share it."""
    groups: dict[FieldDoc, list[str]] = {}
    for method in sorted(ALGORITHMS):
        for doc in method_options(method):
            if doc.path.endswith(f".{option}"):
                groups.setdefault(replace(doc, path=option), []).append(method)
    return [replace(doc, path=f"{METHODS_PREFIX}.{option} ({', '.join(names)})") for doc, names in groups.items()]


def explain_text(doc: FieldDoc) -> str:
    """One field as ``p2pfed explain`` prints it."""
    lines = [doc.path, f"  type:    {doc.type_name}"]
    if doc.allowed:
        lines.append(f"  allowed: {', '.join(doc.allowed)}")
    if doc.bounds:
        lines.append(f"  bounds:  {doc.bounds}")
    if doc.default:
        lines.append(f"  default: {doc.default}")
    wrapped = textwrap.wrap(doc.description, width=96, initial_indent="  ", subsequent_indent="  ",
                            break_on_hyphens=False)
    return "\n".join([*lines, *wrapped])
