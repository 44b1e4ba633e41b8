"""The README's performance table is what the committed benches measured, and a goal reads as met
only when every method's figure is within it."""

from __future__ import annotations

import csv
import json

from tests.bench_scripts import load_bench_script

table = load_bench_script("performance_table")


def test_the_readme_performance_table_is_what_the_committed_benches_give():
    assert table.main(["--check"]) == 0, "run python bench/performance_table.py and commit README.md"


def _scale_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["method", "devices", "rounds", "s_per_round", "first_round_s",
                                               "peak_rss_mib", "error"])
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_scale_goal_is_met_only_when_every_method_is_within_time_and_memory(tmp_path):
    fast = {"method": "gossip-avg", "devices": 10, "rounds": 3, "s_per_round": 6.0, "first_round_s": 60.0,
            "peak_rss_mib": 1024.0, "error": ""}
    cell, met = table.scale_cell(_scale_csv(tmp_path / "a.csv", [fast]), minutes=15, gib=16)
    assert met == "yes" and cell == "projected from 3 rounds: gossip-avg 11 min, 1.0 GiB"   # (60 + 99 x 6) / 60
    heavy = {**fast, "method": "fedsub", "peak_rss_mib": 17 * 1024.0}
    assert table.scale_cell(_scale_csv(tmp_path / "b.csv", [fast, heavy]), minutes=15, gib=16)[1] == "no"
    refused = {**fast, "method": "fedsub", "s_per_round": "", "first_round_s": "", "peak_rss_mib": "",
               "error": "x.yaml: dataset.synthetic.num_devices: the run needs about 45.0 GiB for 10 devices"}
    cell, met = table.scale_cell(_scale_csv(tmp_path / "c.csv", [fast, refused]), minutes=15, gib=16)
    assert met == "no" and "fedsub: not run (refused before it starts, needs about 45.0 GiB)" in cell


def test_the_random_waypoint_goal_reads_every_recorded_run(tmp_path):
    record = tmp_path / "fedsub-8h.txt"
    record.write_text("# commit abc1234, a date\n"
                      "\tElapsed (wall clock) time (h:mm:ss or m:ss): 4:30.00\n"
                      "\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02:00\n")
    cell, met = table.rwp_cell(record, minutes=5)
    assert cell == "FedSub 4.5 to 62.0 min (2 runs, at abc1234)" and met == "no"


def test_the_flops_goal_takes_each_methods_median_ratio(tmp_path):
    path = tmp_path / "flops.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["pass", "what", "x_bound_cpu"])
        writer.writeheader()
        for what, ratios in {"training alone": [2, 3, 9], "gossip-avg": [2.5, 2.9, 40], "fedsub": [4, 5, 6]}.items():
            writer.writerows({"pass": i, "what": what, "x_bound_cpu": r} for i, r in enumerate(ratios))
    cell, met = table.flops_cell(path, {"gossip-avg": 3.0, "fedsub": 5.0})
    assert cell == "gossip-avg 2.9×; fedsub 5.0× (training alone 3.0×)" and met == "yes"


def test_a_sharded_run_is_met_only_with_equal_results(tmp_path):
    run = {"method": "gossip-avg", "devices": 40, "shards": 2, "max_f1_difference": 0.0,
           "projected": [{"machines": 8, "s_per_round": 0.5}]}
    path = tmp_path / "sharded.json"
    path.write_text(json.dumps(run))
    assert table.sharded_cell(path)[1] == "yes"
    path.write_text(json.dumps({**run, "max_f1_difference": 0.01}))
    assert table.sharded_cell(path)[1] == "no"
