"""The README's threat table is what the committed seed-level tests give, "holds" means what it
says (TOST at the margin, a fraction counted only when every smaller one holds too), and a cell it
says holds is what the runtime gives when run again."""

from __future__ import annotations

import functools
import numpy as np
import pytest
from scipy import stats

from tests.bench_scripts import load_bench_script

adversaries = load_bench_script("adversaries_tests")
threat = load_bench_script("threat_table")
ROOT = threat.ROOT


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


@functools.cache
def _cells(study: str) -> list:
    from p2pfed.sweeps.archive import stored_cells

    return list(stored_cells(ROOT / "bench" / "results" / study).values())


def _stored_cell(study: str, method: str, defence: str, attack: str, seed: int):
    """The committed cell of ``study`` with that method, defence, attack ('alie 10 %') and seed."""
    kind, percent, _ = attack.rsplit(" ", 2)
    for cell in _cells(study):
        config = cell.summary["config"]
        (entry,) = config["adversaries"] or [{"kind": None, "fraction": None}]
        if (config["algorithm"]["name"], config["algorithm"]["robust"], config["seed"]) == (method, defence, seed) \
                and entry["kind"] == kind and round(100 * entry["fraction"]) == int(percent):
            return cell
    raise AssertionError(f"no committed cell of {study}: {method}, {defence}, {attack}, seed {seed}")


@pytest.mark.parametrize("method", ["gossip-avg", "ditto", "fedsub"])
def test_a_defence_the_table_says_holds_gives_the_committed_honest_f1_when_run_again(method):
    """The README's first "holds" of each method (an attack at the smaller share, in the table's
    order), its seed 1 run again through the real runtime from the committed cell's own
    configuration: the honest devices end with the committed F1, so the table rests on what the
    code gives (within float rounding between machines, far inside the 0.05 margin)."""
    from p2pfed.engine.runner import run_scenario
    from p2pfed.scenario.loader import load_mapping

    _, defences, kinds, _ = threat.declared_order()
    rows = {(r["defence"], r["attack"]): r for r in threat.read_studies() if r["method"] == method}
    held = [(d, f"{k} {p} %", rows[(d, f"{k} {p} %")]["study"]) for d in defences if d != "none" for k in kinds
            for p in (10,) if (d, f"{k} {p} %") in rows and threat._held(rows[(d, f"{k} {p} %")])]
    assert held, f"the table shows nothing holding on {method}"
    defence, attack, study = held[0]
    cell = _stored_cell(study, method, defence, attack, 1)
    spec = load_mapping(cell.summary["config"], f"{study} cell", ROOT / "scenarios", ["engine.torch_threads=1"])
    summary = run_scenario(spec, progress=False)
    assert summary is not None
    assert summary["adversaries"]["honest_f1_mean"] == pytest.approx(
        cell.summary["adversaries"]["honest_f1_mean"], abs=0.005), (defence, attack)


@pytest.mark.parametrize("design", threat.STUDIES, ids=lambda p: p.stem)
def test_each_matrix_results_page_is_generated_from_its_cells(design):
    """A matrix study's results README is what ``bench/adversaries_tests.py --design`` writes from
    the committed cells and tables: its commit, run count and departures are read, not typed."""
    import yaml

    folder = ROOT / yaml.safe_load(design.read_text())["results"]
    tables = (folder / "table.md").read_text()
    assert (folder / "README.md").read_text() == adversaries.readme(folder, design, tables), \
        f"run {yaml.safe_load(design.read_text())['analysis']} --design {design.relative_to(ROOT)}"
