"""The libyaml-backed parser gives what PyYAML's own ``safe_load`` gives, on every YAML file the
project ships and on the scalars ``--set`` texts hold."""

import math

import pytest
import yaml

from p2pfed.yamltext import load_yaml
from tests.conftest import ROOT

SHIPPED = sorted(p for folder in ("scenarios", "sweeps", "topologies", "examples", "bench", "docs", "p2pfed")
                 for p in (ROOT / folder).rglob("*.yaml"))
SCALARS = ["0.05", "1e-3", "1.0e+4", "[8, 16]", "{a: 1, b: [x, y]}", "true", "no", "null", "~", "0x1f", "0o17",
           "010", "1_000", "2026-11-28", ".inf", "-.inf", "'quoted: yes'", "plain text", "", "- a\n- b",
           "a: &x [1, 2]\nb: *x", "!!str 5"]


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_yaml_file_reads_the_same(path):
    text = path.read_text()
    assert load_yaml(text) == yaml.safe_load(text)


@pytest.mark.parametrize("text", SCALARS + [".nan"])
def test_scalars_read_the_same_type_and_value(text):
    assert _same(load_yaml(text), yaml.safe_load(text))


def test_bad_yaml_is_refused_by_both_with_a_position():
    text = "a: [1, 2\nb: 3\n"
    with pytest.raises(yaml.YAMLError) as fast:
        load_yaml(text)
    with pytest.raises(yaml.YAMLError) as reference:
        yaml.safe_load(text)
    assert fast.value.problem_mark is not None and reference.value.problem_mark is not None
    assert fast.value.problem_mark.line == reference.value.problem_mark.line


def test_a_python_object_tag_is_refused():
    with pytest.raises(yaml.YAMLError):
        load_yaml("!!python/object/apply:os.system ['true']")
