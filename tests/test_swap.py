"""Running a scenario with another method than its file's: what it keeps, what it leaves out, said once."""

from __future__ import annotations

import json
import logging

import yaml

import p2pfed
from p2pfed.cli.main import main
from p2pfed.scenario.loader import load_scenario, with_algorithm
from tests.conftest import ROOT

OPPORTUNISTIC = ROOT / "scenarios" / "opportunistic-poisson.yaml"
SMALL = ROOT / "scenarios" / "synthetic-small.yaml"
TINY = ["dataset.synthetic.num_devices=3", "dataset.synthetic.samples_per_class=8", "rounds=1"]


def test_a_method_that_forwards_nothing_of_the_files_turns_forwarding_off_and_says_so():
    loaded = load_scenario(OPPORTUNISTIC, ["algorithm.name=gossip-avg"])
    assert loaded.scenario.forwarding.enabled is False
    assert loaded.swapped is not None and loaded.swapped.from_method == "fedsub"
    assert "store-carry-forward is off" in loaded.swapped.left_out["forwarding.enabled"]
    assert "forwarding" in loaded.swapped.message()
    # The file's options gossip-avg does not know are named, each with why.
    assert {k for k in loaded.swapped.left_out if k.startswith("algorithm.")} == {
        f"algorithm.{k}" for k in load_scenario(OPPORTUNISTIC).scenario.algorithm.options}


def test_every_way_of_swapping_gives_the_same_scenario_and_the_same_report():
    by_set = load_scenario(OPPORTUNISTIC, ["algorithm.name=gossip-avg"])
    by_compare = with_algorithm(load_scenario(OPPORTUNISTIC), "gossip-avg")
    by_api = p2pfed.load(OPPORTUNISTIC, algorithm="gossip-avg")
    assert by_set.scenario == by_compare.scenario == by_api.scenario
    assert by_set.swapped == by_compare.swapped == by_api.swapped


def test_the_files_own_method_or_forwarding_given_anew_is_no_swap_to_report():
    assert load_scenario(OPPORTUNISTIC).swapped is None
    assert load_scenario(OPPORTUNISTIC, ["algorithm.name=fedsub"]).swapped is None
    kept = load_scenario(OPPORTUNISTIC, ["algorithm.name=gossip-avg", "forwarding.parts=[whole]"])
    assert kept.scenario.forwarding.enabled and kept.scenario.forwarding.parts == ["whole"]
    assert "forwarding.enabled" not in kept.swapped.left_out


def test_a_run_with_another_method_warns_once_without_verbose_and_writes_it_to_the_summary(tmp_path, caplog):
    raw = yaml.safe_load(SMALL.read_text())
    raw["algorithm"] = {"name": "fedsub", "fusion": "overlap"}
    scenario = tmp_path / "fedsub.yaml"
    scenario.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    root, level = logging.getLogger(), logging.getLogger().level
    root.setLevel(logging.ERROR)   # the command line's level without -v
    try:
        args = ["run", str(scenario), "--algorithm", "gossip-avg", "--quiet", "--out", str(out)]
        assert main([*args, *(x for item in TINY for x in ("--set", item))]) == 0
    finally:
        root.setLevel(level)
    warnings = [r for r in caplog.records if r.name == "p2pfed.swap"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert "algorithm.fusion" in warnings[0].getMessage()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["swapped"] == {"from": "fedsub", "to": "gossip-avg",
                                  "left_out": {"algorithm.fusion": "gossip-avg has no such option"}}
    assert "swapped" not in summary["config"]   # the resolved scenario (a sweep cell's identity) is unchanged


def test_a_run_of_the_files_own_method_has_no_swapped_section(tmp_path):
    out = tmp_path / "run"
    assert main(["run", str(SMALL), "--quiet", "--out", str(out), *(x for item in TINY for x in ("--set", item))]) == 0
    assert "swapped" not in json.loads((out / "summary.json").read_text())
