"""Whole runs through the CLI: scenario → SimPy → ZeroMQ → results files."""

import csv
import json

import pytest

from p2pfed.cli.main import main
from p2pfed.engine.runner import run_scenario
from p2pfed.results.provenance import code_version
from p2pfed.scenario.loader import load_scenario, with_algorithm

SMALL = ["rounds=4", "dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=20",
         "model.hidden=[16,32]"]


def test_run_writes_every_results_file(repo_root, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", str(repo_root / "scenarios" / "synthetic-small.yaml"), "--out", str(out),
                 "--quiet", *sum((["--set", s] for s in SMALL), [])])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("algorithm", "scenario", "seed", "devices", "rounds", "wall_time_s", "sim_time_s"):
        assert key in summary
    assert set(summary["final"]) == {"f1_macro_mean", "f1_macro_std", "loss_mean", "accuracy_mean", "f1_present_mean",
                                     "f1_after_fusion_mean", "accuracy_after_fusion_mean",
                                     "f1_after_training_mean", "accuracy_after_training_mean"}
    assert summary["evaluation"]["protocol"] == "after-fusion"
    assert summary["code"] == code_version()   # which code made it (provenance)
    comm = summary["comm"]
    assert {"bytes_sent_total", "bytes_per_device_per_round", "full_model_bytes", "messages_sent",
            "messages_dropped"} <= set(comm)
    # complete graph on 6 devices, 4 rounds: every device sends to 5 peers each round
    assert comm["messages_sent"] == 6 * 5 * 4 and comm["messages_dropped"] == 0
    rows = list(csv.DictReader((out / "rounds.csv").open()))
    assert [int(r["round"]) for r in rows] == [1, 2, 3, 4]
    # each row counts exactly the traffic of the rounds evaluated so far
    assert [int(r["messages_sent"]) for r in rows] == [30, 60, 90, 120]
    assert int(rows[-1]["bytes_sent_total"]) == comm["bytes_sent_total"]
    devices = list(csv.DictReader((out / "devices.csv").open()))
    assert len(devices) == 6
    assert sum(int(d["bytes_sent"]) for d in devices) == comm["bytes_sent_total"]
    assert sum(int(d["bytes_received"]) for d in devices) == comm["bytes_sent_total"]
    assert (out / "plot.png").stat().st_size > 1000
    assert "f1_macro_mean" in capsys.readouterr().out


def test_same_seed_same_numbers_other_seed_other_numbers(repo_root):
    path = repo_root / "scenarios" / "synthetic-small.yaml"

    def numbers(seed):
        s = run_scenario(load_scenario(path, SMALL, seed=seed), progress=False)
        return s["final"], s["comm"]["bytes_sent_total"]

    assert numbers(5) == numbers(5)
    assert numbers(5) != numbers(6)


def test_compare_prints_table_and_writes_files(repo_root, tmp_path, capsys):
    out = tmp_path / "cmp"
    code = main(["compare", str(repo_root / "scenarios" / "synthetic-small.yaml"), "--algorithms",
                 "fedsub,gossip-avg,local", "--out", str(out), "--quiet",
                 *sum((["--set", s] for s in SMALL), [])])
    assert code == 0
    table = capsys.readouterr().out
    for name in ("fedsub", "gossip-avg", "local"):
        assert name in table and (out / name / "summary.json").exists()
    rows = list(csv.DictReader((out / "comparison.csv").open()))
    assert [r["algorithm"] for r in rows] == ["fedsub", "gossip-avg", "local"]
    local = json.loads((out / "local" / "summary.json").read_text())
    assert local["comm"]["bytes_sent_total"] == 0
    assert (out / "comparison.png").exists()


def test_unknown_algorithm_in_compare_exits_2(repo_root, capsys):
    assert main(["compare", str(repo_root / "scenarios" / "synthetic-small.yaml"),
                 "--algorithms", "fedsub,nope"]) == 2
    assert "unknown algorithm 'nope'" in capsys.readouterr().err


@pytest.mark.slow
def test_quickstart_fedsub_beats_both_baselines(tmp_path):
    """The issue's acceptance run (about 2-3 minutes): FedSub above gossip-avg and local."""
    finals = {}
    base = load_scenario(None)
    for name in ("fedsub", "gossip-avg", "local"):
        finals[name] = run_scenario(with_algorithm(base, name), progress=False)["final"]["f1_macro_mean"]
    assert finals["fedsub"] > finals["gossip-avg"] and finals["fedsub"] > finals["local"], finals
