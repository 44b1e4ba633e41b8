"""Scenario files: validation errors a user can act on, overrides, the embedded default."""

import re
from pathlib import Path

import pytest

from p2pfed.cli.main import main
from p2pfed.scenario.loader import embedded_default_text, load_scenario
from p2pfed.scenario.errors import ScenarioError


def _problems(tmp_path: Path, text: str) -> list[str]:
    f = tmp_path / "s.yaml"
    f.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(f)
    return err.value.problems


def test_broken_scenario_reports_every_problem_naming_file_and_field(repo_root, capsys):
    path = repo_root / "scenarios" / "broken.yaml"
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    fields = [re.match(rf"{re.escape(str(path))}: ([\w.]+): ", line).group(1) for line in lines]
    assert sorted(fields) == sorted(["seed", "rounds", "dataset.name", "topology.bandwidth_bps",
                                     "engine.rund_period_s", "algorithm.fusion", "algorithm.extractoin",
                                     "topology.file"])
    assert any("unknown key" in line and "rund_period_s" in line for line in lines)


def test_shipped_scenarios_validate(repo_root, capsys):
    # The WESAD and DREAMT templates read a table the user produces: tests/test_stress_sleep_templates.py
    # validates and runs them on a stand-in file.
    skipped = {"broken.yaml", "wesad-stress.yaml", "dreamt-sleep.yaml"}
    files = sorted(str(p) for p in (repo_root / "scenarios").glob("*.yaml") if p.name not in skipped)
    assert files
    assert main(["validate", *files]) == 0


def test_invalid_yaml_names_line(tmp_path):
    (problem,) = _problems(tmp_path, "rounds: 3\ndataset: [unclosed\n")
    assert re.search(r"s\.yaml:\d+:\d+: invalid YAML", problem)


def test_unknown_algorithm_lists_choices(tmp_path):
    (problem,) = _problems(tmp_path, "algorithm:\n  name: fedmagic\n")
    assert "algorithm.name" in problem and "fedsub" in problem and "gossip-avg" in problem


def test_options_of_other_algorithm_are_errors(tmp_path):
    (problem,) = _problems(tmp_path, "algorithm:\n  name: gossip-avg\n  fusion: overlap\n")
    assert "algorithm.fusion: unknown key" in problem


def test_overrides_and_seed(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("rounds: 3\n")
    loaded = load_scenario(f, ["topology.kind=ring", "model.hidden=[8, 4]", "algorithm.fusion=cluster-avg"],
                           seed=11)
    sc = loaded.scenario
    assert (sc.rounds, sc.seed, sc.topology.kind, sc.model.hidden) == (3, 11, "ring", [8, 4])
    assert sc.algorithm.options == {"fusion": "cluster-avg"}
    with pytest.raises(ScenarioError, match="topology.kindd: unknown key"):
        load_scenario(f, ["topology.kindd=ring"])


def test_another_model_keeps_the_settings_given_with_it(repo_root):
    """Switching a CNN scenario to the MLP drops the file's CNN options but keeps what the
    command line gave, key by key or as a whole section (a sweep's grid sets whole sections)."""
    cnn = repo_root / "scenarios" / "digits-cnn.yaml"
    for overrides in (["model={name: mlp, hidden: [64, 64]}"], ["model.name=mlp", "model.hidden=[64, 64]"]):
        model = load_scenario(cnn, overrides).scenario.model
        assert (model.name, model.hidden, model.options) == ("mlp", [64, 64], {}), overrides
    assert load_scenario(cnn, ["model.name=mlp"]).scenario.model.hidden == [128, 512]


def test_missing_scenario_file_is_one_line(tmp_path):
    with pytest.raises(ScenarioError, match="scenario file not found"):
        load_scenario(tmp_path / "nope.yaml")


def test_embedded_default_is_the_quickstart(repo_root):
    assert embedded_default_text() == (repo_root / "scenarios" / "quickstart.yaml").read_text()
    assert load_scenario(None).scenario.name == "quickstart"


def test_the_loader_turns_each_name_into_its_class_once_and_the_run_never_again(repo_root, tmp_path, monkeypatch):
    """A user's method and model are named by file: each is looked up when the scenario is loaded
    (through a swap of the method as well), and building, checking and running the devices use
    the classes the run spec holds."""
    import p2pfed.algorithms.registry as registry
    import p2pfed.learning.model as model
    from p2pfed.engine.runner import simulate

    (tmp_path / "mine.py").write_text(
        "import torch\nfrom p2pfed.algorithms import Algorithm\n\n\nclass Mine(Algorithm):\n    name = 'mine'\n\n\n"
        "def tiny(input_size, num_classes, generator):\n    return torch.nn.Linear(input_size, num_classes)\n")
    looked_up = []
    for module in (registry, model):
        real = module.load_object
        monkeypatch.setattr(module, "load_object", lambda name, *a, real=real, **k: looked_up.append(name)
                            or real(name, *a, **k))
    method, factory = f"{tmp_path / 'mine.py'}:Mine", f"{tmp_path / 'mine.py'}:tiny"
    spec = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml",
                         [f"algorithm.name={method}", f"model.name={factory}", "rounds=1",
                          "dataset.synthetic.num_devices=3", "dataset.synthetic.samples_per_class=6"])
    assert spec.swapped is not None and spec.method.__name__ == "Mine" and spec.model_factory.__name__ == "tiny"
    done = simulate(spec, progress=False)
    assert done is not None and done.summary["algorithm"] == "mine"
    assert looked_up == [method, factory]
