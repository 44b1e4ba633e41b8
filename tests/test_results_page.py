"""docs/results.md is generated from the committed results, and its words follow the tests: a
difference only where the adjusted p supports it, "level" only where an equivalence test does."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tests.bench_scripts import load_bench_script

ROOT = Path(__file__).resolve().parents[1]


page = load_bench_script("results_page")


def test_docs_results_md_is_what_the_committed_results_give():
    """Every figure of the page is computed from bench/results (the sweeps' archives, paired.csv
    and summary.csv): the committed page is exactly what the generator writes from them."""
    expected = page.build()
    committed = page.PAGE.read_text()
    assert committed == expected, f"docs/results.md is out of date: run `{page.COMMAND}` and commit it"


def test_the_page_names_no_issue_and_states_each_family():
    text = page.PAGE.read_text()
    assert not re.search(r"\bissues?\s*#?\d+|#\d+\b", text, re.IGNORECASE)
    tables = text.count("| A | B | n |")
    assert tables > 20 and text.count("Family: Benjamini–Hochberg over the") >= tables


def _row(diffs: list[float], p_adj: float | None = None):
    """A paired.csv row made from per-seed differences, as p2pfed's paired test writes it."""
    d = np.asarray(diffs)
    low, high = stats.t.interval(0.95, d.size - 1, loc=d.mean(), scale=d.std(ddof=1) / np.sqrt(d.size))
    p = float(stats.ttest_1samp(d, 0.0).pvalue)
    return page.Row("a", "b", d.size, 0.8 + d.mean(), 0.8, float(d.mean()), float(low), float(high), p,
                    p if p_adj is None else p_adj)


def test_equivalence_p_is_the_two_one_sided_tests_on_the_seeds():
    diffs = [0.004, -0.003, 0.006, 0.001, -0.002, 0.003]
    margin = 0.02
    d = np.asarray(diffs)
    direct = max(stats.ttest_1samp(d, -margin, alternative="greater").pvalue,
                 stats.ttest_1samp(d, margin, alternative="less").pvalue)
    assert page.equivalence_p(_row(diffs), margin) == pytest.approx(direct, rel=1e-6)


def test_a_non_significant_p_is_not_shown_different_never_level():
    """A wide interval around zero: no difference and no equivalence, so "not shown different"."""
    wide = page.with_equivalence([_row([0.05, -0.04, 0.03, -0.05, 0.02])], 0.02)[0]
    assert not wide.decided and wide.verdict == "not shown different"
    assert page.relation_holds(wide, "level") == "open" and page.relation_holds(wide, "above") == "open"
    narrow = page.with_equivalence([_row([0.002, -0.001, 0.001, -0.002, 0.001])], 0.02)[0]
    assert narrow.verdict == "level" and page.relation_holds(narrow, "level") == "holds"


def test_equivalence_p_values_are_adjusted_over_the_family():
    rows = [_row([0.002, -0.001, 0.001, -0.002, 0.001]), _row([0.012, 0.018, 0.009, 0.015, 0.02])]
    raw = [page.equivalence_p(r, 0.02) for r in rows]
    adjusted = [r.equivalent_adj for r in page.with_equivalence(rows, 0.02)]
    assert adjusted == pytest.approx(list(stats.false_discovery_control(raw, method="bh")))


def test_a_claim_is_judged_part_by_part():
    below = _row([-0.03, -0.04, -0.035, -0.028, -0.031])
    above = below.flipped()
    assert below.verdict == "below" and above.verdict == "above"
    assert page.relation_holds(above, "above") == "holds" and page.relation_holds(below, "above") == "contradicted"
    assert page.claim_verdict({"x": ["holds", "holds"]}) == "**yes**"
    assert page.claim_verdict({"x": ["holds", "open"]}) == "**not shown**"
    assert page.claim_verdict({"x": ["holds", "contradicted"]}) == "**no**"
    assert page.claim_verdict({"x": ["holds"], "y": ["contradicted"]}) == "**partly**: x: yes; y: no"


@pytest.mark.parametrize("folder", ["wisdm-static-fusion", "quickstart-exchange-contacts"])
def test_a_committed_sweeps_tables_regenerate_from_its_archive(folder):
    """The slim sweep folders keep what the page needs: their archive gives the committed
    summary.csv and paired.csv again."""
    from p2pfed.sweeps import store
    from p2pfed.sweeps.aggregate import collect, summary_columns, summary_rows
    from p2pfed.sweeps.archive import csv_text, is_packed
    from p2pfed.sweeps.paired import COLUMNS, paired_rows

    out = ROOT / "bench" / "results" / folder
    assert is_packed(out) and not (out / "cells").exists()
    _, keys, points = store.read_manifest(out)
    results = collect(out, points)
    assert all(r.status == "done" for r in results)
    assert csv_text(summary_columns(keys), summary_rows(results, keys)) == (out / "summary.csv").read_bytes().decode()
    assert csv_text(COLUMNS, paired_rows(results)) == (out / "paired.csv").read_bytes().decode()


def test_pooled_seeds_regenerate_from_the_archives(tmp_path):
    pool_seeds = load_bench_script("pool_seeds")
    results = ROOT / "bench" / "results"
    assert pool_seeds.main([str(tmp_path), str(results / "wisdm-dynamic-predict"),
                            str(results / "wisdm-dynamic-predict-6-10")]) == 0
    for name in ("summary.csv", "paired.csv"):
        assert (tmp_path / name).read_text() == (results / "wisdm-dynamic-predict-10" / name).read_text()
