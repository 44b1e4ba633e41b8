"""Sweep files: the schema, and reading one with one 'file: field: problem' line per problem.

A sweep file names a base scenario, the methods, the seeds, fixed overrides (``set``) and the
swept keys (``grid``), using the same dotted keys as ``--set``. It is validated like a scenario:
unknown keys are errors, and every problem is reported before anything runs. Every field carries
its description, which the generated ``docs/reference/scenario.md`` shows (a test checks that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from p2pfed.algorithms import Algorithm
from p2pfed.plugins import is_plugin_name
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.loader import describe_error, method_class
from p2pfed.yamltext import load_yaml

RESERVED_KEYS = {"seed": "seeds", "algorithm.name": "methods"}


class SweepError(ScenarioError):
    """A sweep that cannot run; ``problems`` holds one 'file: field: message' line each."""


class SweepSpec(BaseModel):
    """Everything a sweep file may hold (the "Sweep files" section of docs/reference/scenario.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str | None = Field(default=None, description=(
        "Label of the sweep: the default `--out` (`runs/<name>`) and plot titles; null: the file's name without "
        "`.yaml`."))
    description: str = Field(default="", description="Free text about the sweep.")
    scenario: str | None = Field(default=None, description=(
        "The base scenario, relative to the sweep file's folder; null: the embedded quickstart."))
    methods: list[str] | None = Field(default=None, min_length=1, description=(
        "One run per method (a method keeps only the scenario's `algorithm` options it knows); null: the scenario's "
        "`algorithm.name`."))
    seeds: list[int] | None = Field(default=None, min_length=1, description=(
        "One run per seed; summaries give the mean, standard deviation and 95 % interval over seeds. null: the "
        "scenario's `seed`."))
    overrides: dict[str, Any] = Field(default_factory=dict, alias="set", description=(
        "Overrides for every run, `key.sub: value`, as `--set key.sub=value` (values are YAML)."))
    method_overrides: dict[str, dict[str, Any]] = Field(default_factory=dict, alias="method_set", description=(
        "Overrides for one method's runs only, `method: {key.sub: value}`, on top of `set`: a paper's setting for one"
        " baseline that another method with the same option must not get. Each method must be one of `methods` and "
        "have each `algorithm.*` option; a key `grid` sweeps cannot be fixed here."))
    grid: dict[str, list[Any]] = Field(default_factory=dict, description=(
        "The swept keys, `key.sub: [values]`; the grid is their cartesian product. `seed` and `algorithm.name` are "
        "not allowed here (use `seeds` and `methods`)."))

    @field_validator("methods", "seeds")
    @classmethod
    def _no_repeats(cls, values: list | None) -> list | None:
        if values is not None and len(set(map(str, values))) != len(values):
            raise ValueError(f"each entry may appear once, got {values}")
        return values

    @field_validator("overrides", "grid")
    @classmethod
    def _own_keys(cls, mapping: dict[str, Any]) -> dict[str, Any]:
        return _dotted_keys(mapping)

    @field_validator("method_overrides")
    @classmethod
    def _own_method_keys(cls, mapping: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for overrides in mapping.values():
            _dotted_keys(overrides)
        return mapping

    @model_validator(mode="after")
    def _known_methods(self) -> SweepSpec:
        for method, overrides in self.method_overrides.items():
            for key in overrides:
                if key in self.grid:
                    raise ValueError(f"method_set.{method}.{key}: swept by grid.{key}; it cannot also be fixed")
        return self

    @field_validator("grid")
    @classmethod
    def _values_to_sweep(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in grid.items():
            if not values:
                raise ValueError(f"{key}: give at least one value")
            if len({repr(v) for v in values}) != len(values):
                raise ValueError(f"{key}: each value may appear once, got {values}")
        return grid


def _dotted_keys(mapping: dict[str, Any]) -> dict[str, Any]:
    """Keys a sweep may fix or sweep: dotted scenario keys, not the ones its lists set."""
    for key in mapping:
        if key in RESERVED_KEYS:
            raise ValueError(f"{key!r} is set by the sweep's {RESERVED_KEYS[key]!r} list, not here")
        if not key or any(not part for part in key.split(".")):
            raise ValueError(f"{key!r} is not a dotted scenario key such as contacts.range_m")
    return mapping


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file, with its base scenario's path resolved (None: the embedded quickstart)."""

    spec: SweepSpec
    source: str           # the sweep file as given
    name: str
    scenario: Path | None
    methods: dict[str, type[Algorithm]] = field(default_factory=dict)   # the file's ``methods``, resolved


def read_sweep(path: str | Path, overrides: Sequence[str] = (), seeds: Sequence[int] | None = None) -> Sweep:
    """Parse and schema-check a sweep file (every problem at once); ``cells.expand`` checks the grid.

    ``overrides`` (``--set key=value``) join the file's ``set`` and ``seeds`` (``--seeds``) replace
    its seeds, as ``p2pfed run`` overrides a scenario: a shortened sweep needs no edited copy."""
    p = Path(path)
    source = str(p)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise SweepError([f"{source}: sweep file not found"]) from None
    except OSError as exc:
        raise SweepError([f"{source}: cannot read sweep file: {exc.strerror}"]) from None
    raw = _parse(text, source)
    problems: list[str] = _command_line(raw, overrides, seeds)
    here = p.resolve().parent
    if isinstance(raw.get("methods"), list):   # a user's file named relative to this sweep file
        raw["methods"] = [_absolute(m, here) for m in raw["methods"]]
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        problems += [f"{source}: {describe_error(e)}" for e in exc.errors()]
        spec = None
    methods = raw.get("methods")
    classes = {}
    for i, name in enumerate(methods if isinstance(methods, list) else []):
        try:
            classes[str(name)] = method_class(str(name), here)
        except ValueError as exc:
            problems.append(f"{source}: methods.{i}: {exc}")
    scenario = None
    if isinstance(raw.get("scenario"), str):
        scenario = (p.resolve().parent / Path(raw["scenario"]).expanduser()).resolve()
        if not scenario.is_file():
            problems.append(f"{source}: scenario: file not found: {scenario}")
    if problems:
        raise SweepError(problems)
    assert spec is not None   # a spec that failed to validate left problems
    return Sweep(spec, source, spec.name or p.stem, scenario, classes)


def _command_line(raw: dict[str, Any], overrides: Sequence[str], seeds: Sequence[int] | None) -> list[str]:
    """``--set`` and ``--seeds`` into the raw sweep; one line per problem."""
    problems = []
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(f"--set {item!r}: expected key.sub=value")
        elif isinstance(raw.get("grid"), dict) and key in raw["grid"]:
            problems.append(f"--set {key}: swept by the file's grid.{key}; a sweep cannot also fix it")
        else:
            if not isinstance(raw.get("set"), dict):
                raw["set"] = {}
            try:
                raw["set"][key] = load_yaml(value)
            except yaml.YAMLError:
                raw["set"][key] = value
    if seeds is not None:
        raw["seeds"] = list(seeds)
    return problems


def _absolute(name: Any, folder: Path) -> Any:
    """``file.py:Class`` relative to ``folder`` (when the file is there) as an absolute name, so
    every worker finds it whatever its working directory."""
    if not isinstance(name, str) or not is_plugin_name(name):
        return name
    module, _, attr = name.rpartition(":")
    if module.endswith(".py") and not Path(module).is_absolute() and (folder / module).is_file():
        return f"{(folder / module).resolve()}:{attr}"
    return name


def _parse(text: str, source: str) -> dict[str, Any]:
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise SweepError([f"{where}: invalid YAML: {getattr(exc, 'problem', None) or exc}"]) from None
    if not isinstance(raw, dict):
        raise SweepError([f"{source}: a sweep file must be a mapping of keys, got {type(raw).__name__}"])
    return raw
