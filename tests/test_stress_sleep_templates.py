"""The WESAD (stress) and DREAMT (sleep) scenario templates: each runs through the real runtime
on a synthetic stand-in in the documented format, and a table without its label column is
refused naming the file and the column."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from p2pfed.engine.runner import run_scenario
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.loader import load_scenario
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEMPLATES = {   # template: (stand-in kind, features, classes)
    "wesad-stress": ("wesad", 30, ["baseline", "stress", "amusement", "meditation"]),
    "dreamt-sleep": ("dreamt", 8, ["sleep", "wake"]),
}


def _standin() -> ModuleType:
    path = ROOT / "scenarios" / "data" / "make_stress_sleep_standin.py"
    spec = importlib.util.spec_from_file_location("make_stress_sleep_standin", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_template_runs_two_rounds_on_a_standin_file(template: str, tmp_path: Path) -> None:
    kind, features, classes = TEMPLATES[template]
    table = _standin().write_standin(kind, tmp_path / f"{kind}.csv", devices=4, rows=24)
    loaded = load_scenario(ROOT / "scenarios" / f"{template}.yaml", ["rounds=2", f"dataset.path={table}"])
    data = loaded.federation
    assert loaded.scenario.algorithm.name == "fedsub"
    assert [d.name for d in data.devices] == [f"standin-{i:02d}" for i in range(4)]
    assert data.num_features == features and data.class_names == classes
    summary = run_scenario(loaded, tmp_path / "run", progress=False)
    assert summary["devices"] == 4 and 0 <= summary["final"]["f1_macro_mean"] <= 1


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_template_names_the_file_and_column_when_the_label_is_missing(template: str, tmp_path: Path) -> None:
    table = tmp_path / "no-label.csv"
    table.write_text("device,f0,f1\nstandin-00,0.1,0.2\nstandin-00,0.3,0.4\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(ROOT / "scenarios" / f"{template}.yaml", [f"dataset.path={table}"]).federation
    assert any(str(table) in p and "column 'label': missing" in p for p in caught.value.problems), \
        caught.value.problems


def test_templates_keep_the_papers_stated_settings() -> None:
    """1000 rounds, one local epoch, 128-512 MLP, 70/30 split, every device every round, FedSub
    with Overlapping Components on the partial setting (the templates' comments cite where)."""
    for template in TEMPLATES:
        raw = yaml.safe_load((ROOT / "scenarios" / f"{template}.yaml").read_text())
        assert raw["rounds"] == 1000 and raw["training"]["epochs"] == 1
        assert raw["model"]["hidden"] == [128, 512] and raw["dataset"]["test_fraction"] == 0.3
        assert raw["engine"]["participation"] == 1.0
        assert (raw["algorithm"]["fusion"], raw["algorithm"]["depth"]) == ("overlap", "partial")
