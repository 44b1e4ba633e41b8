"""The grid of a sweep: points (method × swept values × seed) and the cells that run them.

A cell is one run, keyed by the SHA-256 of its scenario's canonical form (the fields of the
resolved scenario that differ from the schema's defaults, and the options that differ from the
method's) and of the contents of the files it names. The same cell gets the same key on any
machine, with any number of workers, and after a new field joins the schema at its default,
which is what makes ``--resume`` safe; two points that resolve to the same scenario (e.g. a
method that ignores a swept ``algorithm.*`` option) share one cell and run once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from p2pfed.algorithms import Algorithm
from p2pfed.results.files import folder_label
from p2pfed.scenario.loader import FILE_FIELDS, OPTIONAL_FILE_FIELDS, dump, load_scenario, method_class, user_code
from p2pfed.scenario.spec import RunSpec
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.canonical import canonical
from p2pfed.sweeps.spec import Sweep, SweepError


@dataclass(frozen=True)
class CellSpec:
    """Everything a worker needs to rebuild and run one cell: plain data, no objects."""

    id: str                      # SHA-256 of the canonical scenario and the files it names
    method: str
    seed: int | None             # None: the scenario's own seed
    scenario: str | None         # absolute path of the base scenario; None: the embedded quickstart
    overrides: tuple[str, ...]   # ``key=value`` items as for ``--set``: the sweep's ``set``, then the point

    @property
    def folder(self) -> str:
        """The cell's results folder name under ``OUT/cells/``: the method (a user's class by
        its name alone, ``path/file.py:MyMethod`` as ``MyMethod``) and the key's start."""
        return f"{folder_label(self.method)}-{self.id[:12]}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "overrides": list(self.overrides)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CellSpec:
        return cls(**{**data, "overrides": tuple(data["overrides"])})


@dataclass(frozen=True)
class Point:
    """One entry of the grid; several points may share a cell."""

    method: str
    seed: int
    values: tuple[tuple[str, Any], ...]   # (swept key, value) in the sweep file's order
    cell: CellSpec


def override(key: str, value: Any) -> str:
    """A ``key=value`` override whose value reads back (as YAML) exactly as the sweep file gave it."""
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf)
    return f"{key}={text.removesuffix(chr(10)).removesuffix(chr(10) + '...')}"


def has_option(cls: type[Algorithm], key: str) -> bool:
    """Whether an ``algorithm.*`` key is an option of method ``cls`` (other keys apply to every method)."""
    return not key.startswith("algorithm.") or key.split(".")[1] in cls.Options.model_fields


def resolve(scenario: str | Path | None, method: str, seed: int | None,
            overrides: list[str] | tuple[str, ...], cls: type[Algorithm] | None = None) -> RunSpec:
    """The scenario one cell runs: the base with the overrides, run with ``method`` (``cls``: its
    class, if the sweep has resolved it already).

    Of the ``algorithm.*`` overrides only those ``method`` knows apply, in the way
    ``with_algorithm`` keeps only the options a method knows.
    """
    if cls is None:
        folder = Path.cwd() if scenario is None else Path(scenario).resolve().parent
        try:
            cls = method_class(method, folder)
        except ValueError as exc:
            raise ScenarioError([f"{scenario or '<embedded quickstart>'}: algorithm.name: {exc}"]) from None
    known = [item for item in overrides if has_option(cls, item.partition("=")[0])]
    return load_scenario(scenario, [*known, f"algorithm.name={method}"], seed, method=cls)


def cell_id(loaded: RunSpec) -> str:
    """SHA-256 of the canonical scenario, of the contents of the files it names and of the user's
    own code it runs (a method or model named ``module:Name``): editing any of them makes a new
    cell."""
    resolved = dump(loaded)
    files = {}
    for section, key in (*FILE_FIELDS, *OPTIONAL_FILE_FIELDS):
        path = loaded.resolve(resolved.get(section, {}).get(key))
        if path is not None:
            stat = path.stat()
            files[f"{section}.{key}"] = _file_digest(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    for name, code in user_code(loaded).items():
        files[f"code:{name}"] = code["sha256"]
    text = json.dumps({"scenario": canonical(resolved, loaded.method), "files": files}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@lru_cache(maxsize=64)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def make_cell(scenario: Path | None, method: str, seed: int | None, overrides: list[str],
              cls: type[Algorithm] | None = None) -> CellSpec:
    loaded = resolve(scenario, method, seed, overrides, cls)
    return CellSpec(cell_id(loaded), method, seed, None if scenario is None else str(scenario),
                    tuple(overrides))


def expand(sweep: Sweep) -> list[Point]:
    """Every point of the grid with its cell, or a SweepError listing every problem found.

    The base scenario is checked first (its problems name the scenario file), then each ``set``
    key alone, then each swept value on top of ``set``, then every point; so a bad value is
    reported once, against the sweep field that holds it.
    """
    base = load_scenario(sweep.scenario)
    grid = _Grid(sweep, base, sweep.methods or {base.scenario.algorithm.name: base.method})
    if problems := grid.key_problems():
        raise SweepError(problems)
    if problems := grid.value_problems():
        raise SweepError(problems)
    return grid.points()


class _Grid:
    """A sweep's methods (resolved), fixed overrides and swept values, checked in ``expand``'s order."""

    def __init__(self, sweep: Sweep, base: RunSpec, classes: dict[str, type[Algorithm]]) -> None:
        self.sweep, self.spec, self.src, self.base, self.classes = sweep, sweep.spec, sweep.source, base, classes
        self.methods = self.spec.methods or list(classes)
        self.fixed = [override(k, v) for k, v in self.spec.overrides.items()]
        self.good: list[str] = []   # the fixed overrides that load
        self.own = {m: [override(k, v) for k, v in self.spec.method_overrides.get(m, {}).items()] for m in self.methods}

    def knows(self, method: str, key: str) -> bool:
        return has_option(self.classes[method], key)

    def key_problems(self) -> list[str]:
        """Keys no method of the sweep has; ``method_set`` of a method not swept."""
        spec, src, methods, problems = self.spec, self.src, self.methods, []
        for section, mapping in (("set", spec.overrides), ("grid", spec.grid)):
            problems += [f"{src}: {section}.{key}: no method of this sweep ({', '.join(methods)}) "
                         f"has the option {key.split('.')[1]!r}"
                         for key in mapping if not any(self.knows(m, key) for m in methods)]
        for method, mapping in spec.method_overrides.items():
            if method not in methods:
                problems.append(f"{src}: method_set.{method}: not one of the sweep's methods ({', '.join(methods)})")
                continue
            problems.extend(f"{src}: method_set.{method}.{key}: {method} has no option {key.split('.')[1]!r}"
                            for key in mapping if not self.knows(method, key))
        return problems

    def value_problems(self) -> list[str]:
        """Values that do not load: ``set`` together, then each alone; each swept value; ``method_set``."""
        spec, problems = self.spec, []
        try:   # together first: some keys only make sense with others (model.options with model.name)
            for method in self.methods:
                self._resolve(method, [i for i, k in zip(self.fixed, spec.overrides) if self.knows(method, k)])
            self.good = self.fixed
        except ScenarioError:
            for key, item in zip(spec.overrides, self.fixed):   # then each alone, to name the one at fault
                found = self._check(f"set.{key}", key, [item])
                problems += found
                self.good += [] if found else [item]
        for key, grid_values in spec.grid.items():
            for i, value in enumerate(grid_values):
                problems += self._check(f"grid.{key}[{i}]", key, [*self.good, override(key, value)])
        for method, items in self.own.items():
            if items:
                try:
                    self._resolve(method, [*self.good, *items])
                except ScenarioError as exc:
                    problems += [f"{self.src}: method_set.{method}: {_strip(line, self.base.source, '')}"
                                 for line in exc.problems]
        return problems

    def points(self) -> list[Point]:
        """Every point (method × swept values × seed) with its cell; points of one scenario share it."""
        spec, problems, points = self.spec, [], []
        cells: dict[str, CellSpec] = {}
        seeds: list[int | None] = [*spec.seeds] if spec.seeds else [None]
        for method in self.methods:
            for combo in itertools.product(*spec.grid.values()):
                values = tuple(zip(spec.grid, combo))
                overrides = [*self.fixed, *self.own[method], *(override(k, v) for k, v in values)]
                for seed in seeds:
                    try:
                        cell = make_cell(self.sweep.scenario, method, seed, overrides, self.classes[method])
                    except ScenarioError as exc:
                        where = ", ".join([method, *(f"{k}={v}" for k, v in values)])
                        problems += [f"{self.src}: grid: {where}: {_strip(line, self.base.source, '')}"
                                     for line in exc.problems]
                        continue
                    cell = cells.setdefault(cell.id, cell)
                    points.append(Point(method, self.base.scenario.seed if seed is None else seed, values, cell))
        if problems:
            raise SweepError(list(dict.fromkeys(problems)))
        return points

    def _resolve(self, method: str, overrides: list[str]) -> RunSpec:
        return resolve(self.sweep.scenario, method, None, overrides, self.classes[method])

    def _check(self, label: str, key: str, overrides: list[str]) -> list[str]:
        """The problems of ``overrides`` under the first method that has ``key``."""
        for method in [m for m in self.methods if self.knows(m, key)][:1]:
            try:
                self._resolve(method, overrides)
            except ScenarioError as exc:
                return [f"{self.src}: {label}: {_strip(line, self.base.source, key)}" for line in exc.problems]
        return []


def _strip(line: str, source: str, key: str) -> str:
    """A scenario problem line without the scenario's file name, or the key the label already names."""
    line = line.removeprefix(f"{source}: ")
    return line.removeprefix(f"{key}: ") if key else line
