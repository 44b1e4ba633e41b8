"""bench/sweep_cells_check.py: where a sweep's committed results are, and how two runs' files compare."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def check():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import sweep_cells_check
        yield sweep_cells_check
    finally:
        sys.path.remove(str(ROOT / "bench"))


def test_results_folder_from_header_manifest_or_readme(check):
    sweeps = ROOT / "sweeps"
    assert check.results_folder(sweeps / "adversaries.yaml", "adversaries") == ROOT / "bench/results/adversaries"
    # the header's --out names a subfolder
    assert check.results_folder(sweeps / "contacts-scale-batch-window.yaml", "contacts-scale-batch-window") \
        == ROOT / "bench/results/contacts-scale/batch-window"
    # no --out in the header: the README of the folder a bench script wrote names the sweep file
    assert check.results_folder(sweeps / "quickstart-speedup.yaml", "quickstart-speedup") \
        == ROOT / "bench/results/sweep-speedup"
    # a README naming the file in a folder of another sweep does not count
    assert check.results_folder(sweeps / "wisdm-static-smallworld-seeds.yaml", "wisdm-static-smallworld-seeds") is None


def test_tables_equal_as_numbers_and_differences_listed(check):
    old = [{"round": "1", "f1": "0.5", "loss": "1.0", "wall_time_s": "3.1"},
           {"round": "2", "f1": "0.6", "loss": "0.9", "wall_time_s": "3.2"}]
    same = [{**row, "wall_time_s": "9.9"} for row in old]
    result = check.Comparison()
    check.compare_tables("rounds.csv", old, same, result)
    assert result.differs == [] and result.compared == ["rounds.csv 3 columns x 2 rows"]

    new = [{**old[0], "extra": "1"}, {**old[1], "loss": "0.900004", "extra": "1"}]
    result = check.Comparison()
    check.compare_tables("rounds.csv", old, new, result)
    [column] = result.differs
    assert column.name == "loss" and column.max_abs == pytest.approx(4e-6)
    assert "0.9 -> 0.900004" in column.detail
    assert result.notes == ["rounds.csv: only committed: -; only new: extra"]


def test_json_figures_compare_leaves_and_leave_out_what_is_not_a_figure(check):
    old = {"final": {"f1_macro_mean": 0.5, "loss_mean": 1}, "wall_time_s": 3.0, "code": {"git_commit": "a"}}
    new = {"final": {"f1_macro_mean": 0.5, "loss_mean": 1.0}, "wall_time_s": 7.0, "code": {"git_commit": "b"}}
    result = check.Comparison()
    check.compare_figures("summary.json", old, new, result)
    assert result.differs == [] and result.compared == ["summary.json 2 figures"]

    new["final"]["f1_macro_mean"] = 0.25
    check.compare_figures("summary.json", old, new, result)
    assert [c.name for c in result.differs] == ["final.f1_macro_mean"]
