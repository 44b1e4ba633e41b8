"""The README's threat table is what the committed seed-level tests give, and "holds" means what it
says: TOST at the margin, a fraction counted only when every smaller one holds too."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tests.bench_scripts import load_bench_script

adversaries = load_bench_script("adversaries_tests")
threat = load_bench_script("threat_table")


def test_the_readme_threat_table_is_what_the_committed_tests_give():
    assert threat.main(["--check"]) == 0, "run python bench/threat_table.py and commit README.md"


def test_holds_is_the_larger_of_the_two_one_sided_p_values():
    clean = np.array([0.70, 0.72, 0.68, 0.75, 0.71])
    close = clean + np.array([0.01, -0.02, 0.0, 0.015, -0.005])
    diff = close - clean
    lower = stats.ttest_1samp(diff, -adversaries.MARGIN, alternative="greater").pvalue
    upper = stats.ttest_1samp(diff, adversaries.MARGIN, alternative="less").pvalue
    assert adversaries.equivalence(list(close), list(clean)) == pytest.approx(max(lower, upper))
    assert adversaries.equivalence(list(close), list(clean)) < 0.01
    far_above = clean + np.array([0.10, 0.12, 0.09, 0.11, 0.10])   # better, but not level
    assert adversaries.equivalence(list(far_above), list(clean)) > 0.5
    assert adversaries.non_inferiority(list(far_above), list(clean)) < 0.01   # the one-sided test would pass it
    assert adversaries.equivalence(list(clean), list(clean)) == 0.0           # no spread, inside the margin
    assert adversaries.equivalence(list(clean - 0.2), list(clean)) == 1.0     # no spread, outside it


def _row(defence: str, attack: str, p: float, diff: float = 0.0) -> dict[str, str]:
    return {"test": "holds: |defended - clean| < 0.05 (TOST)", "defence": defence, "attack": attack,
            "p_adjusted": str(p), "f1_diff": str(diff), "seeds": "5", "comparisons": "6"}


def test_a_defence_holds_up_to_a_fraction_only_when_every_smaller_one_holds():
    rows = [_row("median", "alie 10 %", 0.01), _row("median", "alie 20 %", 0.02), _row("median", "alie 30 %", 0.4),
            _row("clip", "alie 10 %", 0.3, 0.08), _row("clip", "alie 20 %", 0.01), _row("clip", "alie 30 %", 0.01)]
    assert threat.up_to(rows) == {("median", "alie"): 20, ("clip", "alie"): 0}
    assert threat.above(rows) == {("median", "alie"): [], ("clip", "alie"): [10]}
