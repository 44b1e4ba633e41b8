"""Property: a scenario file with random invalid values, drawn from the schema itself, is refused
by ``p2pfed validate`` with exit code 2, one line per problem naming the file and the field, and
never a traceback."""

from __future__ import annotations

import contextlib
import io
import math
import re
import tempfile
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types as at
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from p2pfed.cli.main import main
from p2pfed.scenario.schema import Scenario


def leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()):
    """(dotted path, FieldInfo) of every field that is not itself a section."""
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from leaves(ann, prefix + (name,))
        else:
            yield prefix + (name,), info


LEAVES = dict(leaves(Scenario))
SECTIONS = sorted({path[:-1] for path in LEAVES if len(path) > 1})


def _members(ann: Any) -> list[Any]:
    """The types a field admits: a Union's members (None aside), else the annotation itself."""
    if get_origin(ann) in (Union, UnionType):
        return [a for a in get_args(ann) if a is not type(None)]
    return [ann]


BOOL_STRINGS = {"y", "n", "yes", "no", "on", "off", "t", "f", "true", "false", "0", "1"}


def invalid_values(info) -> st.SearchStrategy:
    """Values the field must refuse: a wrong type always, plus what its type and range exclude."""
    members = _members(info.annotation)
    kinds = {get_origin(m) or m for m in members}
    # a mapping is the wrong type for every field but a mapping's own (model.options, algorithm.options)
    options = [st.just(["not", "a mapping"]) if dict in kinds else st.just({"not": "a value"})]
    if kinds & {int, float}:
        options.append(st.sampled_from([math.nan, math.inf, -math.inf, "fast"]))
        for meta in info.metadata:
            if isinstance(meta, at.Ge):
                options.append(st.just(meta.ge - 1))
            elif isinstance(meta, at.Gt):
                options.append(st.just(meta.gt - (1 if int in kinds else 0)))
            elif isinstance(meta, at.Le):
                options.append(st.just(meta.le + 1))
            elif isinstance(meta, at.Lt):
                options.append(st.just(meta.lt + (1 if int in kinds else 0)))
        if int in kinds and float not in kinds:
            options.append(st.just(2.5))
    if Literal in kinds and list not in kinds:
        allowed = {v for m in members if get_origin(m) is Literal for v in get_args(m)}
        if bool in kinds:   # pydantic reads "y", "yes", "on", ... as a bool: valid there
            allowed |= BOOL_STRINGS
        options.append(st.text("abcxyz-", min_size=1, max_size=8).filter(lambda v: v.lower() not in allowed))
    if list in kinds:
        (item,) = get_args(next(m for m in members if get_origin(m) is list))
        if item is float:
            options.append(st.sampled_from([[math.nan, 1.0], [1.0, math.inf]]))
        if item is int:
            options.append(st.sampled_from([[1, "x"], [1, 2.5]]))
    if bool in kinds:
        options.append(st.just([True]))
    return st.one_of(options)


@st.composite
def broken_scenarios(draw) -> tuple[dict, set[str]]:
    """A raw scenario with 1-4 invalid fields (maybe an unknown key too), and their dotted names."""
    paths = draw(st.lists(st.sampled_from(sorted(LEAVES)), min_size=1, max_size=4, unique=True))
    raw: dict = {}
    for path in paths:
        node = raw
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = draw(invalid_values(LEAVES[path]))
    named = {".".join(p) for p in paths}
    if draw(st.booleans()):
        section = draw(st.sampled_from([()] + SECTIONS))
        node = raw
        for part in section:
            node = node.setdefault(part, {})
        node["no_such_key"] = 1
        named.add(".".join((*section, "no_such_key")))
    if "algorithm.name" in named:  # with no valid method there are no options to check keys against
        named.discard("algorithm.no_such_key")
    return raw, named


@settings(max_examples=50, deadline=None)
@given(broken_scenarios())
def test_invalid_values_from_the_schema_are_refused_one_line_each(case):
    raw, named = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzzed.yaml"
        path.write_text(yaml.safe_dump(raw))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["validate", str(path)])
    text = out.getvalue() + err.getvalue()
    assert code == 2, text
    assert "Traceback" not in text
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == len(set(lines))
    fields = []
    for line in lines:
        match = re.match(rf"{re.escape(str(path))}: ([\w.]+): \S", line)
        assert match, line
        fields.append(match.group(1))
    for name in named:  # every broken field is named (list items as field.N)
        assert any(f == name or f.startswith(name + ".") for f in fields), (name, lines)
