"""A declared study's results page (bench/study_results.py): the committed page is the one its
results folder gives, its statistics agree with a computation made here from the committed files
directly, and it refuses a results folder that mixes commits or does not hold the design's seeds.
No simulation runs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from tests.bench_scripts import load_bench_script

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ROOT / "studies"
FEDPEWS = STUDIES / "fedpews-convergence.yaml"
FEDPEWS_RESULTS = ROOT / "bench" / "results" / "fedpews-convergence"
# the designs with arms; a matrix design's results page comes from bench/adversaries_tests.py
# (tests/test_threat_table.py checks it)
DESIGNS = sorted(p for p in STUDIES.glob("*.yaml")
                 if p.name != "claims.yaml" and yaml.safe_load(p.read_text()).get("design") != "matrix")
RUNS_COMMIT = (FEDPEWS_RESULTS / "COMMIT").read_text().strip()
# the page checks that the design was committed before the runs: it reads the runs' commit from git
IN_HISTORY = subprocess.run(["git", "cat-file", "-e", f"{RUNS_COMMIT}^{{commit}}"], cwd=ROOT,
                            capture_output=True).returncode == 0
NEEDS_HISTORY = pytest.mark.skipif(not IN_HISTORY, reason="the runs' commit is not in this checkout's git history")


def _results_module() -> Any:
    return load_bench_script("study_results")


@pytest.fixture(scope="module")
def results() -> Any:
    return _results_module()


def _design(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("path", DESIGNS, ids=lambda p: p.stem)
def test_a_run_study_has_its_generated_results_page(results: Any, path: Path) -> None:
    """A design marked run has a results folder and a page, and the page is what the folder gives;
    a design with a results folder from one commit is marked run."""
    design = _design(path)
    if not results.has_results(design):
        assert design["status"] not in ("run", "running"), \
            f"{path.name}: status {design['status']}, but no results folder with a COMMIT"
        return
    assert design["status"] in ("run", "running"), \
        f"{path.name}: its results are in; its status says {design['status']}"
    commit = (results.results_folder(design) / "COMMIT").read_text().strip()
    if not results.in_history(commit):
        pytest.skip(f"the runs' commit {commit[:12]} is not in this checkout's git history")
    assert results.main(["--check", str(path)]) == 0, f"run python bench/study_results.py {path.relative_to(ROOT)}"


def _independent_table() -> pd.DataFrame:
    """Per run of the committed fedpews-convergence folder: method, seed, rounds to F1 0.65 (101
    when never, as the design declares), final F1 and generalization F1, read here with pandas."""
    rows = []
    for summary_file in sorted(FEDPEWS_RESULTS.glob("*/cells/*/summary.json")):
        summary = json.loads(summary_file.read_text())
        curve = pd.read_csv(summary_file.parent / "rounds.csv").sort_values("round")
        reached = curve.loc[curve["f1_macro_mean"] >= 0.65, "round"]
        rows.append({"method": summary["config"]["algorithm"]["name"], "seed": summary["seed"],
                     "rounds": float(reached.iloc[0]) if len(reached) else 101.0,
                     "final": summary["final"]["f1_macro_mean"], "gen": summary["final"]["generalization_f1_mean"]})
    return pd.DataFrame(rows)


@NEEDS_HISTORY
def test_fedpews_statistics_agree_with_scipy_on_the_committed_runs(results: Any) -> None:
    table = _independent_table()
    assert len(table) == 30
    wide = table.pivot(index="seed", columns="method")
    design = _design(FEDPEWS)
    assert design["target"]["f1"] == 0.65 and "101" in design["target"]["never"]
    mine = {}
    for metric, a, b in [("rounds", "gossip-avg", "fedpews"), ("final", "fedpews", "gossip-avg"),
                         ("gen", "fedpews", "gossip-avg")]:
        xa, xb = wide[metric][a].to_numpy(), wide[metric][b].to_numpy()
        mine[metric] = (float(np.mean(xa - xb)), float(stats.ttest_rel(xa, xb).pvalue))
    adjusted = dict(zip(mine, stats.false_discovery_control([p for _, p in mine.values()], method="bh")))
    rows = {r.hypothesis["id"]: r for r in results.tested(results.read_study(FEDPEWS))}
    assert set(rows) == {"rounds", "final", "gen"}
    for hypothesis, (diff, p) in mine.items():
        assert rows[hypothesis].n == 10
        assert rows[hypothesis].diff == pytest.approx(diff, abs=1e-12)
        assert rows[hypothesis].p == pytest.approx(p, rel=1e-9)
        assert rows[hypothesis].p_adjusted == pytest.approx(adjusted[hypothesis], rel=1e-9)
        assert rows[hypothesis].low < diff < rows[hypothesis].high
    # the sweep's own paired.csv (per-device F1 from devices.csv) tests the final F1 the same way
    paired = pd.read_csv(FEDPEWS_RESULTS / "fedpews-convergence-baselines" / "paired.csv")
    row = paired[(paired["a"] == "fedpews") & (paired["b"] == "gossip-avg") & (paired["protocol"] == "after-fusion")]
    assert float(row["p_value"].iloc[0]) == pytest.approx(rows["final"].p, rel=5e-3)
    assert float(row["f1_diff"].iloc[0]) == pytest.approx(rows["final"].diff, abs=1e-5)


def _copy(tmp_path: Path) -> Path:
    """The committed fedpews-convergence folder with only what the analysis reads."""
    folder = tmp_path / "fedpews-convergence"
    shutil.copytree(FEDPEWS_RESULTS, folder, ignore=shutil.ignore_patterns(
        "dataset.json", "devices.csv", "edges.csv", "*.png", "*.html", "README.md"))
    return folder


def _refusal(results: Any, folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert results.main(["--results", str(folder), str(FEDPEWS)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


@NEEDS_HISTORY
def test_a_copy_of_the_committed_folder_gives_the_committed_page(results: Any, tmp_path: Path) -> None:
    """The guard for the refusals below: the copy itself is accepted and gives the same page."""
    folder = _copy(tmp_path)
    assert results.main(["--results", str(folder), str(FEDPEWS)]) == 0
    assert (folder / "README.md").read_text() == (FEDPEWS_RESULTS / "README.md").read_text()


@NEEDS_HISTORY
def test_refuses_a_sweep_folder_of_another_commit(results: Any, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(tmp_path)
    shutil.copytree(folder / "fedpews-convergence-baselines", folder / "more-seeds")
    (folder / "more-seeds" / "COMMIT").write_text("0" * 40 + "\n")
    err = _refusal(results, folder, capsys)
    assert "more-seeds/COMMIT" in err and "one commit" in err


@NEEDS_HISTORY
def test_refuses_a_run_recorded_at_another_commit(results: Any, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(tmp_path)
    summary_file = sorted(folder.glob("*/cells/fedpews-*/summary.json"))[0]
    summary = json.loads(summary_file.read_text())
    summary["code"]["git_commit"] = "f" * 40
    summary_file.write_text(json.dumps(summary))
    err = _refusal(results, folder, capsys)
    assert f"{summary_file.parent.name}/summary.json" in err and "ffffffffffff" in err


@NEEDS_HISTORY
def test_refuses_an_arm_without_the_declared_seeds(results: Any, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(tmp_path)
    for summary_file in folder.glob("*/cells/local-*/summary.json"):
        if json.loads(summary_file.read_text())["seed"] == 7:
            shutil.rmtree(summary_file.parent)
    err = _refusal(results, folder, capsys)
    assert "fedpews-convergence-baselines" in err and "arm local" in err and "seeds 1 to 10" in err
    assert "studies/fedpews-convergence.yaml" in err


@NEEDS_HISTORY
def test_refuses_a_run_that_is_no_arm(results: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(tmp_path)
    summary_file = sorted(folder.glob("*/cells/local-*/summary.json"))[0]
    summary = json.loads(summary_file.read_text())
    summary["config"]["algorithm"]["name"] = "fedsub"
    summary_file.write_text(json.dumps(summary))
    err = _refusal(results, folder, capsys)
    assert f"{summary_file.parent.name}/summary.json" in err and "no arm" in err


def _row(results: Any, kind: str, diff: float, p_adjusted: float) -> Any:
    h = {"id": "h", "kind": kind, "a": "x", "b": "y", "metric": "f1_macro_mean", "delta": 0.02, "margin": 0.02}
    row = results.Row(h, 10, 0.5 + diff, 0.5, diff, diff - 0.01, diff + 0.01, p_adjusted, p_adjusted)
    results.word(row, 0.05)
    return row


def test_verdicts_follow_the_wording_rules(results: Any) -> None:
    """Non-significant superiority never reads as level; "equivalent" only where TOST rejects."""
    assert _row(results, "superiority", 0.001, 0.5).verdict == "no difference of 0.02 or more shown"
    assert _row(results, "superiority", 0.03, 0.01).verdict == "x > y shown"
    assert _row(results, "superiority", 0.01, 0.01).verdict == "x > y shown (by less than the declared 0.02)"
    assert _row(results, "superiority", -0.03, 0.01).verdict.startswith("y > x shown, the opposite")
    assert _row(results, "equivalence", 0.001, 0.01).verdict == "equivalent within ±0.02"
    assert _row(results, "equivalence", 0.001, 0.2).verdict == "equivalence within ±0.02 not shown"
    shown, none, opposite = (_row(results, "superiority", d, p) for d, p in [(0.03, 0.01), (0.0, 0.5), (-0.03, 0.01)])
    level = _row(results, "equivalence", 0.0, 0.01)
    assert results.claim_status([shown], ["h"]).startswith("reproduced (")
    assert results.claim_status([none], ["h"]).startswith("no difference of the declared delta or more shown")
    assert results.claim_status([shown, opposite], ["h"]).startswith("not reproduced")
    assert results.claim_status([shown, none], ["h"]).startswith("reproduced in part")
    assert results.claim_status([level], ["h"]).startswith("equivalent within the margin")


def test_tost_rejects_only_inside_the_margin(results: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """TOST on seed pairs: a difference well inside the margin is equivalent, one at the margin is not."""
    noise = np.random.default_rng(0).normal(0.0, 0.002, 10)
    h = {"id": "h", "kind": "equivalence", "a": "x", "b": "y", "scenario": "s", "metric": "m", "margin": 0.02}
    for shift, expected in [(0.0, True), (0.02, False)]:
        values = {"x": 0.5 + shift + noise, "y": np.full(10, 0.5)}
        monkeypatch.setattr(results, "side", lambda study, text, scenario, metric, v=values: v[text])
        row = results.test(None, h)
        assert (row.p < 0.05) is expected, (shift, row.p)


class _Cell:
    """A stored run as the analysis reads it: its summary and its rounds.csv rows."""

    def __init__(self, summary: dict[str, Any], curve: list[tuple[int, float]]) -> None:
        self.summary, self.curve, self.folder = summary, curve, None

    def rows(self, name: str) -> list[dict[str, str]]:
        assert name == "rounds.csv"
        return [{"round": str(r), "f1_macro_mean": str(f)} for r, f in self.curve]


def _study(results: Any, design: dict[str, Any], arms: dict[str, list[_Cell]]) -> Any:
    runs = {(arm, "s"): {seed: results.Run(arm, "s", seed, cell, f"{arm}/{seed}", Path("."))
                         for seed, cell in enumerate(cells, start=1)} for arm, cells in arms.items()}
    return results.Study(Path("studies/x.yaml"), design, Path("."), "0" * 40, runs)


def _design_with(n: int, **extra: Any) -> dict[str, Any]:
    return {"study": "x", "power": {"n": n}, "metrics": {"primary": "f1_macro_mean at the end"},
            "arms": {"a": {"method": "m"}, "b": {"method": "m"}}, "hypotheses": [], **extra}


def test_descriptions_ratios_best_arm_and_convergence(results: Any) -> None:
    """Described metrics with per-seed ratios, the best arm of a declared set, the best round, and
    the convergence rule, each on runs whose answers are known."""
    rng = np.random.default_rng(1)
    bytes_a, bytes_b = rng.uniform(2e6, 3e6, 5), rng.uniform(1e6, 1.2e6, 5)
    rounds = list(range(10, 110, 10))
    flat = [(r, 0.8) for r in rounds]
    rising = [(r, 0.5 + r / 400) for r in rounds]
    arms = {"a": [_Cell({"final": {"f1_macro_mean": 0.8}, "comm": {"bytes_per_message": float(x)},
                         "algorithm_stats": {"plan_marginal_error": 0.01}}, flat) for x in bytes_a],
            "b": [_Cell({"final": {"f1_macro_mean": 0.75}, "comm": {"bytes_per_message": float(x)},
                         "algorithm_stats": {"plan_marginal_error": 0.2}}, rising) for x in bytes_b]}
    design = _design_with(
        5, hypotheses=[{"id": "bytes", "claim": "c", "kind": "descriptive", "in_family": False,
                        "metric": "bytes_per_message", "arms": ["a", "b"], "ratio_to": "b"}],
        best_configuration={"rule": "highest mean", "among": ["a", "b"]},
        convergence={"last_rounds": [60, 100], "earlier_rounds": [10, 50], "tolerance": 0.005,
                     "plan_metric": "plan_marginal_error", "plan_below": 0.05})
    study = _study(results, design, arms)
    described = "\n".join(results.described_lines(study, "s"))
    ratio = bytes_a / bytes_b
    low, high = stats.t.interval(0.95, 4, loc=ratio.mean(), scale=ratio.std(ddof=1) / np.sqrt(5))
    assert "| a | " in described and f"{ratio.mean():.2f} [{low:.2f}, {high:.2f}]" in described
    assert "| b | " in described and "1.00 [1.00, 1.00]" in described
    assert "**a**" in "\n".join(results.best_lines(study, "s"))
    assert results.best_round(study.runs["b", "s"]) == 100 and results.best_round(study.runs["a", "s"]) == 10
    convergence = results.convergence_lines(study, "s")
    line_a, line_b = (next(x for x in convergence if x.startswith(f"- {arm}:")) for arm in "ab")
    assert "- a: converged" in line_a and "under 0.05" in line_a and "not under" not in line_a
    assert "not converged**: 5 of 5 seeds" in line_b and "**not under** 0.05" in line_b
    assert results.value(design, "plan_marginal_error", study.runs["b", "s"][1]) == 0.2


def test_a_running_study_shows_its_progress_and_no_result(results: Any, tmp_path: Path) -> None:
    """A study whose runs span sessions (status running) may lack seeds; its page says which runs
    are in and how to continue, and shows none of their results."""
    folder = _copy(tmp_path)
    for summary_file in folder.glob("*/cells/local-*/summary.json"):
        if json.loads(summary_file.read_text())["seed"] in (4, 7):
            shutil.rmtree(summary_file.parent)
    design = tmp_path / "fedpews-convergence.yaml"
    design.write_text(FEDPEWS.read_text().replace("status: run", "status: running"))
    assert results.main(["--results", str(folder), str(design)]) == 0
    text = (folder / "README.md").read_text()
    assert "**28 of 30 runs are in**" in text and f"commit `{RUNS_COMMIT}`" in text
    assert "| digits | local | 1–3, 5, 6, 8–10 of 1–10 |" in text
    assert "| digits | fedpews | 1–10 of 1–10 |" in text
    assert "0." not in text and "verdict" not in text    # no F1, no p, no verdict before every run is in
    design.write_text(FEDPEWS.read_text())                  # the same folder, read as a finished study: refused
    assert results.main(["--results", str(folder), str(design)]) == 2


def test_seed_spans(results: Any) -> None:
    assert results._spans([]) == "none"
    assert results._spans([1, 2, 3, 5, 6, 9, 10, 11, 12]) == "1–3, 5, 6, 9–12"


def test_the_claims_table_is_one_family_across_studies(results: Any) -> None:
    """Every hypothesis that decides a claim, in every study that ran, is adjusted together (each
    once); one that decides no claim stays out; a claim's status follows the joint adjustment."""
    def row(hid: str, p: float) -> Any:
        h = {"id": hid, "kind": "superiority", "a": "x", "b": "y", "delta": 0.02}
        return results.Row(h, 10, 0.55, 0.5, 0.05, 0.03, 0.07, p)
    rows = {"s1": [row("h1", 0.02), row("h2", 0.5), row("unused", 0.0001)], "s2": [row("h1", 0.04)]}
    claims = [{"id": "c1", "decided_by": {"study": "s1", "hypotheses": ["h1"]}},
              {"id": "c2", "decided_by": {"study": "s1", "hypotheses": ["h1", "h2"]}},
              {"id": "c3", "decided_by": {"study": "s2", "hypotheses": ["h1"]}},
              {"id": "c4", "decided_by": {"study": "s3", "hypotheses": ["h1"]}},   # its study has not run
              {"id": "c5", "status": "not run: no data"}]
    status = results.claims_family(rows, claims, 0.05)
    assert set(status) == {"c1", "c2", "c3"}
    joint = stats.false_discovery_control([0.02, 0.5, 0.04], method="bh")   # s1's h1, h2; s2's h1
    assert f"adjusted p {joint[0]:.3g}" in status["c1"] and status["c1"].startswith("no difference")
    assert f"adjusted p {joint[2]:.3g}" in status["c3"]
    assert rows["s1"][0].p_adjusted != rows["s1"][0].p_adjusted      # the studies' own rows untouched (NaN)
    alone = results.claims_family({"s1": [row("h1", 0.02)]}, claims[:1], 0.05)
    assert alone["c1"].startswith("reproduced")                        # the same test alone is significant
