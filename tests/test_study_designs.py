"""The study designs in studies/: each parses, names only scenario fields and methods that exist
(or lists them as still to add, with their paper), every arm validates as a scenario, every
hypothesis maps to a quoted claim, and each design's n is what bench/study_power.py computes
from the committed results. No simulation runs."""

from __future__ import annotations

import inspect
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from p2pfed.algorithms import ALGORITHMS
from p2pfed.learning.cnn import make_cnn
from p2pfed.scenario.fields import METHODS_PREFIX, scenario_fields
from p2pfed.scenario.loader import load_scenario
from tests.bench_scripts import load_bench_script

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ROOT / "studies"
ALL_DESIGNS = sorted(p for p in STUDIES.glob("*.yaml") if p.name != "claims.yaml")
MATRICES = [p for p in ALL_DESIGNS if yaml.safe_load(p.read_text()).get("design") == "matrix"]
DESIGNS = [p for p in ALL_DESIGNS if p not in MATRICES]   # the designs with arms, tied to quoted claims
KINDS = {"superiority", "equivalence", "descriptive"}
PAPERS = Path(os.environ.get("P2PFED_PAPERS", "/work/shared/papers"))


def _power_module() -> Any:
    return load_bench_script("study_power")


def _read(path: Path) -> dict[str, Any]:
    with open(path) as f:
        return yaml.safe_load(f)


def _claims() -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in _read(STUDIES / "claims.yaml")["claims"]}


def _to_add(design: dict[str, Any], kind: str) -> set[str]:
    return {t["name"] for t in design.get("to_add", []) if (t["kind"] == "method") == (kind == "method")}


def _arm_terms(text: str) -> list[str]:
    """The arms a hypothesis side names: one arm, or ``x - y`` (a difference of two arms)."""
    return [part.strip() for part in str(text).split(" - ")]


def test_the_four_seed_paper_designs_exist() -> None:
    assert {"fedsub-as-papers", "safl-as-paper", "fedali-converged", "fedpews-convergence"} <= {p.stem for p in DESIGNS}


@pytest.mark.parametrize("path", DESIGNS, ids=lambda p: p.stem)
def test_design_names_only_existing_fields_and_methods(path: Path) -> None:
    design = _read(path)
    fields = scenario_fields()
    added_methods, added_fields = _to_add(design, "method"), _to_add(design, "field")
    names = list(design["settings"]) + [k for arm in design["arms"].values() for k in arm.get("set", {})]
    unknown = [n for n in names if n not in fields]
    assert not unknown, f"{path.name}: not scenario fields: {unknown}"
    for arm, spec in design["arms"].items():
        assert spec["method"] in ALGORITHMS or spec["method"] in added_methods, f"{path.name}: {arm}"
    for entry in design.get("to_add", []):
        assert entry["paper"] and entry["read"], f"{path.name}: {entry['name']} needs its paper and what was read"
    assert not added_methods & set(ALGORITHMS), "a method to add exists now: move it out of to_add"
    assert not {f for f in added_fields if f in fields}, "a field to add exists now: move it out of to_add"
    for entry in design.get("added", []):   # shipped for the study: it exists, and says what was read
        assert entry["paper"] and entry["read"], f"{path.name}: {entry['name']} needs its paper and what was read"
        name = entry["name"]
        if entry["kind"] == "method":
            assert name in ALGORITHMS, f"{path.name}: added method {name} is not registered"
        elif entry["kind"] == "cnn option":
            assert name.rpartition(".")[2] in inspect.signature(make_cnn).parameters, name
        else:
            assert name in fields, f"{path.name}: added field {name} is not a scenario field"


def _arm_values(design: dict[str, Any], method: str, arm_set: dict[str, Any]) -> dict[str, Any]:
    """The arm's settings as a scenario's keys: the method's own options lose the method's name,
    other methods' options are dropped."""
    values: dict[str, Any] = {"algorithm.name": method}
    for key, value in {**design["settings"], **arm_set}.items():
        head, _, rest = key.partition(".")
        if head == METHODS_PREFIX and rest != "name":
            owner, _, option = rest.partition(".")
            if owner == method:
                values[f"{METHODS_PREFIX}.{option}"] = value
            continue
        values[key] = value
    return values


@pytest.mark.parametrize("path", DESIGNS, ids=lambda p: p.stem)
def test_every_runnable_arm_validates_in_every_scenario(path: Path) -> None:
    design = _read(path)
    for scenario in design["scenarios"].values():
        for arm, spec in design["arms"].items():
            if spec["method"] not in ALGORITHMS:
                continue
            values = _arm_values(design, spec["method"], spec.get("set", {}))
            try:
                load_scenario(ROOT / scenario, values=values)
            except Exception as err:  # noqa: BLE001 - the message names the arm at fault
                pytest.fail(f"{path.name}: arm {arm} in {scenario}: {err}")


@pytest.mark.parametrize("path", DESIGNS, ids=lambda p: p.stem)
def test_hypotheses_map_to_arms_claims_and_variance(path: Path) -> None:
    design = _read(path)
    claims = _claims()
    ids = [h["id"] for h in design["hypotheses"]]
    assert len(ids) == len(set(ids)), f"{path.name}: hypothesis ids repeat"
    for h in design["hypotheses"]:
        assert h["kind"] in KINDS, h
        assert h["claim"] in claims, f"{path.name}: {h['id']} names no claim of studies/claims.yaml"
        assert path.stem in str(claims[h["claim"]].get("decided_by", {}).get("study")), h["id"]
        if h["kind"] == "descriptive":
            assert h.get("in_family") is False and all(a in design["arms"] for a in h["arms"])
            assert h.get("ratio_to", h["arms"][0]) in h["arms"], f"{h['id']}: ratio_to is not one of its arms"
            continue
        assert h["scenario"] in design["scenarios"], h["id"]
        for side in ("a", "b"):
            assert all(t in design["arms"] for t in _arm_terms(h[side])), f"{h['id']}: {h[side]}"
        assert ("margin" if h["kind"] == "equivalence" else "delta") in h, h["id"]
        assert h["variance"] in design["power"]["variance"], h["id"]
    assert design["family"]["correction"] == "benjamini-hochberg"
    assert "one commit" in design["one_commit"]


@pytest.mark.parametrize("path", DESIGNS, ids=lambda p: p.stem)
def test_declared_n_is_the_one_the_script_computes(path: Path) -> None:
    design = _read(path)
    computed = _power_module().design_n(design)
    assert design["power"]["n"] == computed
    assert computed >= 10


def _runs_in_history() -> bool:
    """Whether every committed study's runs' commit is in this checkout's git history (the pages
    read whether each design was committed before its runs)."""
    commits = {p.read_text().strip() for p in (ROOT / "bench" / "results").glob("*/COMMIT")}
    return all(subprocess.run(["git", "cat-file", "-e", f"{c}^{{commit}}"], cwd=ROOT,
                              capture_output=True).returncode == 0 for c in commits)


@pytest.mark.skipif(not _runs_in_history(), reason="a study's runs' commit is not in this checkout's git history")
def test_committed_pages_are_the_generated_ones() -> None:
    pages = load_bench_script("study_pages")
    stale = [path.name for path, text in pages.pages().items() if not path.is_file() or path.read_text() != text]
    assert not stale, f"run python bench/study_pages.py: {stale}"


def test_power_script_detects_a_wrong_n(tmp_path: Path) -> None:
    design = _read(STUDIES / "fedpews-convergence.yaml")
    design["power"]["n"] += 1
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump(design))
    assert _power_module().main(["--check", str(wrong)]) == 1


def test_claims_table_rows_are_decided_or_say_why_not() -> None:
    designs = {p.stem: {h["id"] for h in _read(p)["hypotheses"]} for p in DESIGNS}
    claims = _claims()
    assert {c["paper"] for c in claims.values()} == set(_read(STUDIES / "claims.yaml")["papers"])
    for claim in claims.values():
        if claim["status"] in ("not yet run", "run"):
            decided = claim["decided_by"]
            study_status = _read(STUDIES / f"{decided['study']}.yaml")["status"]
            assert (claim["status"] == "run") == (study_status == "run"), f"{claim['id']}: its study is {study_status}"
            missing = set(decided["hypotheses"]) - designs[decided["study"]]
            assert not missing, f"{claim['id']}: no such hypotheses {missing}"
        else:
            assert claim["status"].startswith("not run: ") and "decided_by" not in claim, claim["id"]
    out_of_reach = [c for c in claims.values() if "WESAD" in c["status"] or "DREAMT" in c["status"]]
    assert {c["paper"] for c in out_of_reach} == {"fedsub-journal", "fedsub-ubiquitous"}


def _quotes() -> list[tuple[str, str, str]]:
    """(where, paper, quote) of every claim and of the FedSub design's depth definition."""
    out = [(c["id"], c["paper"], c["quote"]) for c in _claims().values()]
    depth = _read(STUDIES / "fedsub-as-papers.yaml")["depth"]["definition"]
    return out + [(d["where"], d["where"].split()[0], d["quote"]) for d in depth]


@pytest.mark.skipif(not PAPERS.is_dir(), reason="the papers' texts are not on this machine")
def test_every_quote_is_in_its_paper() -> None:
    for where, paper, quote in _quotes():
        text = (PAPERS / f"{paper}.txt").read_text()
        at = 0
        for fragment in quote.split(" … "):
            found = text.find(fragment, at)
            assert found >= 0, f"{where}: not in {paper}: {fragment[:60]!r}"
            at = found + len(fragment)


def _sweeps_module() -> Any:
    return load_bench_script("study_sweeps")


def test_committed_sweeps_are_the_generated_ones():
    generated = {path: text for design in DESIGNS for path, text in _sweeps_module().sweeps(design).items()}
    stale = [path.name for path, text in generated.items() if not path.is_file() or path.read_text() != text]
    assert not stale, f"run python bench/study_sweeps.py: {stale}"


@pytest.mark.parametrize("path", DESIGNS, ids=lambda p: p.stem)
def test_each_study_sweeps_every_arm_once_in_every_scenario(path: Path) -> None:
    """At one seed, the study's sweep files run one distinct cell per arm and scenario: no arm is
    left out, none runs twice, and every cell validates as a scenario."""
    from p2pfed.sweeps.cells import expand
    from p2pfed.sweeps.spec import read_sweep

    design = _read(path)
    cells = set()
    for sweep in _sweeps_module().sweeps(path):
        points = expand(read_sweep(sweep, seeds=[1]))
        cells |= {p.cell.id for p in points}
        assert len({p.cell.id for p in points}) == len(points), f"{sweep.name}: two points run one cell"
    assert len(cells) == len(design["arms"]) * len(design["scenarios"])


def _attack_cells(design: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The ``adversaries`` values a matrix design declares: none, then each attack (``a+b``: kinds
    combined) at each fraction."""
    return [[]] + [[{"kind": kind.split("+") if "+" in kind else kind, "fraction": f, **options}]
                   for kind, options in design["attacks"].items() for f in design["fractions"]]


@pytest.mark.parametrize("path", MATRICES, ids=lambda p: p.stem)
def test_a_matrix_designs_sweep_runs_exactly_what_it_declares(path: Path) -> None:
    """The sweep file a matrix design names runs its methods, scenario, settings, seeds 1 to n, every
    defence and every attack at every fraction, and nothing else."""
    import json

    design = _read(path)
    sweep = _read(ROOT / design["sweep"])
    assert sweep["methods"] == design["methods"]
    scenario = (ROOT / design["sweep"]).parent / sweep["scenario"]
    assert scenario.resolve() == (ROOT / design["scenario"]).resolve()
    assert sweep["seeds"] == list(range(1, design["power"]["n"] + 1))
    assert sweep["set"] == design["settings"]
    assert set(sweep["grid"]) == {"algorithm.robust", "adversaries"}
    assert sweep["grid"]["algorithm.robust"] == design["defences"]
    canonical = sorted(json.dumps(a, sort_keys=True) for a in sweep["grid"]["adversaries"])
    assert canonical == sorted(json.dumps(a, sort_keys=True) for a in _attack_cells(design))
    members = len(design["defences"]) * len(design["attacks"]) * len(design["fractions"]) + len(design["defences"]) - 1
    assert design["family"]["size"] == members and design["family"]["correction"] == "benjamini-hochberg"
    assert "one commit" in design["one_commit"]


@pytest.mark.parametrize("path", MATRICES, ids=lambda p: p.stem)
def test_a_matrix_designs_n_is_its_power_analysis_or_a_pilot_that_says_why(path: Path) -> None:
    design = _read(path)
    power = _power_module()
    (need,) = power.needs(design)
    assert need.alpha == pytest.approx(design["power"]["q"] / design["family"]["size"])
    pilot = design["power"].get("pilot")
    if pilot is None:
        assert design["power"]["n"] == power.design_n(design) >= 10
    else:
        assert design["power"]["n"] == pilot["n"] == power.design_n(design) < need.n and pilot["why"]
