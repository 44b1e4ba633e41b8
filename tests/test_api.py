"""The Python API: ``p2pfed.run`` / ``compare`` / ``sweep`` give what the command gives, as tables;
live logging reaches callbacks and TensorBoard; the notebook example runs."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import p2pfed
from p2pfed.cli.main import main
from p2pfed.results.callbacks import Callback
from p2pfed.scenario.errors import ScenarioError
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
SMALL = {"dataset.synthetic.num_devices": 4, "dataset.synthetic.samples_per_class": 12}


class Recording(Callback):
    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.summary: dict | None = None

    def on_evaluation(self, row: dict) -> None:
        self.rows.append(row)

    def on_end(self, summary: dict) -> None:
        self.summary = summary


def test_a_run_gives_the_files_rows_as_tables_and_tells_callbacks_each_evaluation(tmp_path):
    heard = Recording()
    run = p2pfed.run(SCENARIO, algorithm="gossip-avg", rounds=3, overrides=SMALL, out=tmp_path / "run",
                     callbacks=[heard])
    on_disk = pd.read_csv(tmp_path / "run" / "rounds.csv")
    pd.testing.assert_frame_equal(run.rounds, on_disk, check_dtype=False)
    pd.testing.assert_frame_equal(run.devices, pd.read_csv(tmp_path / "run" / "devices.csv"), check_dtype=False)
    assert run.summary == json.loads((tmp_path / "run" / "summary.json").read_text()) | {
        "wall_time_s": run.summary["wall_time_s"]}
    assert [r["round"] for r in heard.rows] == [1, 2, 3]
    assert [r["f1_macro_mean"] for r in heard.rows] == list(on_disk["f1_macro_mean"])
    assert heard.summary is run.summary or heard.summary == run.summary
    assert run.f1 == run.summary["final"]["f1_macro_mean"]
    figure = run.plot(tmp_path / "again.png")
    assert (tmp_path / "again.png").stat().st_size > 1000 and len(figure.axes) == 2


def test_a_scenario_may_be_a_mapping_and_bad_input_is_the_same_one_line_error():
    mapping = {"name": "py", "rounds": 2, "dataset": {"name": "synthetic", "synthetic": {"num_devices": 3}},
               "model": {"hidden": [8]}, "algorithm": {"name": "local"}, "topology": {"kind": "complete"}}
    assert p2pfed.run(mapping).summary["scenario"] == "py"
    with pytest.raises(ScenarioError) as error:
        p2pfed.run({**mapping, "rounds": 0, "typo": 1})
    assert error.value.problems == ["<scenario mapping>: rounds: Input should be greater than or equal to 1 (got 0)",
                                    "<scenario mapping>: typo: unknown key"]


def test_compare_takes_a_users_class_as_a_method(tmp_path):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from loss_weighted_gossip import LossWeightedGossip
        table = p2pfed.compare(SCENARIO, ["local", LossWeightedGossip], rounds=2, overrides=SMALL, out=tmp_path)
    finally:
        sys.path.remove(str(ROOT / "examples"))
    assert list(table["algorithm"]) == ["local", "loss-weighted-gossip"]   # the class by its own name
    assert (tmp_path / "LossWeightedGossip" / "summary.json").exists()
    class Nested(LossWeightedGossip):   # not importable by name from another process
        pass
    with pytest.raises(ValueError, match="defined at the top level of a module"):
        p2pfed.run(SCENARIO, algorithm=Nested, rounds=1)


def test_tensorboard_logs_every_evaluation_as_the_rounds_file_has_it(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    code = main(["run", str(SCENARIO), "--algorithm", "local", "--quiet", "--out", str(tmp_path / "run"),
                 "--log", f"tensorboard:{tmp_path / 'tb'}", "--set", "rounds=3",
                 *sum((["--set", f"{k}={v}"] for k, v in SMALL.items()), [])])
    assert code == 0
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    logged = [(e.step, round(e.value, 5)) for e in events.Scalars("p2pfed/f1_macro_mean")]
    rows = list(csv.DictReader((tmp_path / "run" / "rounds.csv").open()))
    assert logged == [(int(r["round"]), round(float(r["f1_macro_mean"]), 5)) for r in rows]
    assert main(["run", "--log", "mlflow:x", "--set", "rounds=1"]) == 2


@pytest.mark.slow   # in the slow set .ci/run also runs
def test_the_notebook_example_runs(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "notebook.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mean macro-F1" in done.stdout and "loss-weighted-gossip" in done.stdout   # labelled by its name
    assert (tmp_path / "runs" / "notebook" / "run.png").exists()
    assert (tmp_path / "runs" / "notebook" / "sweep" / "summary.csv").exists()


def test_keyword_arguments_and_overrides_arrive_as_the_python_values_given():
    for text in ("no", "007", "1e3", "[1, 2]"):   # YAML would read a bool, an int, a float, a list
        assert p2pfed.load(SCENARIO, overrides={"name": text}).scenario.name == text
    lr = np.linspace(0.05, 0.25, 5)[-1]   # a numpy float, as a notebook's sweep makes: it has no YAML text
    loaded = p2pfed.load(SCENARIO, rounds=20, seed=5, overrides={"training.lr": lr, "model.hidden": (16, 8)})
    sc = loaded.scenario
    assert (sc.rounds, sc.seed, sc.training.lr, sc.model.hidden) == (20, 5, 0.25, [16, 8])
    # A list of texts is the command line's language, read as --set reads it.
    with pytest.raises(ScenarioError, match="name: Input should be a valid string"):
        p2pfed.load(SCENARIO, overrides=["name=no"])


def test_a_run_spec_from_load_runs_as_it_is_and_twice_gives_the_same_numbers():
    spec = p2pfed.load(SCENARIO, algorithm="gossip-avg", rounds=2, overrides=SMALL)
    assert p2pfed.load(spec) is spec                          # no change: the same spec, its parts built once
    first, second = p2pfed.run(spec), p2pfed.run(spec)        # the second run on the parts the first used
    fresh = p2pfed.run(SCENARIO, algorithm="gossip-avg", rounds=2, overrides=SMALL)
    for run in (second, fresh):
        pd.testing.assert_frame_equal(run.rounds.drop(columns="wall_time_s", errors="ignore"),
                                      first.rounds.drop(columns="wall_time_s", errors="ignore"))
        pd.testing.assert_frame_equal(run.devices, first.devices)
    changed = p2pfed.load(spec, rounds=3, overrides={"training.lr": 0.2})   # changes make a new spec
    assert (changed.scenario.rounds, changed.scenario.training.lr, changed.method) == (3, 0.2, spec.method)
    assert changed.scenario.dataset == spec.scenario.dataset
