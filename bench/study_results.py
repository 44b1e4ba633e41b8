"""A declared study's results page, computed from its results folder exactly as its design declares.

Reads a design (``studies/<study>.yaml``) and its results folder (``bench/results/<study>/``, or
the design's ``results``), which ``python bench/study_sweeps.py --run`` fills from one commit,
and writes the folder's ``README.md``: each hypothesis of the design tested at the seed level
(the unit is the seed; the arms pair up by seed), Benjamini–Hochberg over the declared family,
each verdict worded under the rules of ``studies/README.md``, the described metrics per arm, and
where the runs depart from the design.

- Metrics: ``rounds_to_target`` is the first evaluated round whose ``f1_macro_mean`` reaches the
  design's target (``target.f1``, or ``targets[<scenario>]``); a run that never does counts as
  the number the design declares ("counts as N"). ``mean_f1_over_evaluations`` is the mean of
  ``f1_macro_mean`` over every evaluated round. Any other metric is the run's final value
  (``summary.json``: ``final``, then ``comm``, then ``evaluation``, then the method's own
  ``algorithm_stats``). ``best_round`` is an arm's, not a run's: the evaluated round where the
  arm's mean ``f1_macro_mean`` over seeds is highest.
- Descriptions: a ``descriptive`` hypothesis gives each of its arms' mean of its metric, and with
  ``ratio_to`` each seed's ratio to that arm's value, averaged over seeds; ``best_configuration``'s
  ``among`` names the arm with the highest mean primary metric; ``convergence`` with
  ``last_rounds``, ``earlier_rounds`` and ``tolerance`` says whether each arm converged (every
  seed's mean F1 over the last rounds within the tolerance of its mean over the earlier ones), and
  ``plan_metric`` with ``plan_below`` whether each arm's mean of that metric is under the bound.
- Tests: ``superiority``: the two-sided paired t test of a − b (``scipy.stats.ttest_rel``);
  ``equivalence``: TOST at ±margin (two one-sided paired t tests, the larger p); ``descriptive``
  hypotheses are described per arm, untested. An arm side written ``x - y`` is the per-seed
  difference of two arms.
- Words: a superiority test whose adjusted p is under q reads "a > b shown" (or the opposite,
  shown, when the difference has the other sign); otherwise "no difference of delta or more
  shown". "Equivalent within ±margin" only where TOST rejects; otherwise "equivalence within
  ±margin not shown".

It refuses (a one-line error naming the file, exit 2) a folder without ``COMMIT``, a run from
another commit or from a tree with uncommitted changes, a run that matches no arm, an arm run
twice at one seed, and an arm whose seeds are not 1 to the design's n. A design whose ``status``
is ``running`` (its runs span sessions) gets a progress page instead: which runs are in, from
which commit, and how to continue; none of their results until every run is in.

    python bench/study_results.py studies/fedpews-convergence.yaml
    python bench/study_results.py --check studies/fedpews-convergence.yaml
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import study_power
import study_sweeps
import yaml
from scipy import stats

from p2pfed.sweeps.archive import StoredCell, stored_cells

ROOT = study_power.ROOT
CONFIDENCE = 0.95
ARM_METRICS = ("best_round",)   # an arm's, over its seeds; not one run's
BOOKKEEPING = ("status",)   # design keys that may change after the runs: not the declaration


class ResultsError(ValueError):
    """A results folder that the design's analysis must not read; the message names the file."""


@dataclass
class Run:
    """One finished run of one arm at one seed."""

    arm: str
    scenario: str
    seed: int
    cell: StoredCell
    where: str                                  # the file that holds it, for messages
    sweep: Path                                 # the sweep folder that holds it


@dataclass
class Row:
    """One hypothesis's test."""

    hypothesis: dict[str, Any]
    n: int
    mean_a: float
    mean_b: float
    diff: float
    low: float
    high: float
    p: float
    p_adjusted: float = math.nan
    verdict: str = ""
    shown: str = ""            # "claimed", "opposite" or "" (nothing shown)


@dataclass
class Study:
    """A design with its runs, read and checked."""

    path: Path
    design: dict[str, Any]
    folder: Path
    commit: str
    runs: dict[tuple[str, str], dict[int, Run]]
    departures: list[str] = field(default_factory=list)


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def results_folder(design: dict[str, Any]) -> Path:
    """Where a design's runs are: its ``results``, else ``bench/results/<study>``."""
    return ROOT / design.get("results", f"bench/results/{design['study']}")


def has_results(design: dict[str, Any]) -> bool:
    return (results_folder(design) / "COMMIT").is_file()


def page_path(design: dict[str, Any]) -> Path:
    return results_folder(design) / "README.md"


# --- reading and checking the folder ------------------------------------------------------------

def _cells(folder: Path, commit: str) -> list[tuple[StoredCell, str, Path]]:
    """Every finished run under ``folder``'s sweep folders, each checked to come from ``commit``."""
    out, top = [], _rel(folder / "COMMIT")
    for sweep in sorted(p for p in folder.iterdir() if p.is_dir()):
        stamp = sweep / "COMMIT"
        if stamp.is_file() and stamp.read_text().strip() != commit:
            raise ResultsError(f"{_rel(stamp)}: commit {stamp.read_text().strip()[:12]}, but {top} says "
                               f"{commit[:12]}: runs of one study come from one commit")
        for name, cell in sorted(stored_cells(sweep).items()):
            where = _rel(cell.folder / "summary.json") if cell.folder else f"{_rel(sweep / 'cells.jsonl')} ({name})"
            code = cell.summary.get("code") or {}
            if code.get("git_commit") != commit:
                raise ResultsError(f"{where}: run at commit {str(code.get('git_commit'))[:12]}, but {top} says "
                                   f"{commit[:12]}: runs of one study come from one commit")
            if code.get("git_dirty"):
                raise ResultsError(f"{where}: run from a tree with uncommitted changes")
            out.append((cell, where, sweep))
    return out


def _config(cell: StoredCell, key: str) -> Any:
    """The value a run's resolved scenario gives a dotted key (``algorithm.<method>.x``: its own ``x``)."""
    config = cell.summary.get("config", {})
    parts = key.split(".")
    if parts[0] == "algorithm" and len(parts) == 3:
        parts = ["algorithm", parts[2]]
    value: Any = config
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def _arm_of(design: dict[str, Any], cell: StoredCell) -> str | None:
    """The arm a run is: its method, and every setting that tells that method's arms apart."""
    method = cell.summary.get("config", {}).get("algorithm", {}).get("name")
    arms = {a: s for a, s in design["arms"].items() if s["method"] == method}
    keys = sorted({k for spec in arms.values() for k in spec.get("set", {})})
    found = [a for a, spec in arms.items()
             if all(_same(_config(cell, k), study_sweeps.arm_value(design, method, spec, k)) for k in keys)]
    return found[0] if len(found) == 1 else None


def _scenario_of(design: dict[str, Any], cell: StoredCell) -> str | None:
    file = str(cell.summary.get("scenario_file", ""))
    found = [name for name, path in design["scenarios"].items() if file.endswith(str(path))]
    return found[0] if len(found) == 1 else None


def read_study(path: Path, folder: Path | None = None, *, partial: bool = False) -> Study:
    """The design at ``path`` with its runs from ``folder`` (default: the design's results folder);
    ``partial``: a study still running, whose arms may lack seeds (read for its progress only)."""
    design = study_power.load(path)
    folder = folder or results_folder(design)
    stamp = folder / "COMMIT"
    if not stamp.is_file():
        raise ResultsError(f"{_rel(stamp)}: missing; a study's results folder names the one commit of its runs")
    commit = stamp.read_text().strip()
    runs: dict[tuple[str, str], dict[int, Run]] = {(a, s): {} for s in design["scenarios"] for a in design["arms"]}
    for cell, where, sweep in _cells(folder, commit):
        arm, scenario = _arm_of(design, cell), _scenario_of(design, cell)
        if arm is None or scenario is None:
            raise ResultsError(f"{where}: a run of {cell.summary.get('algorithm')} on "
                               f"{cell.summary.get('scenario')} that is no arm of {_rel(path)}")
        seed = int(cell.summary["seed"])
        if seed in runs[arm, scenario]:
            raise ResultsError(f"{where}: arm {arm} ({scenario}) seed {seed} ran twice "
                               f"(also {runs[arm, scenario][seed].where})")
        runs[arm, scenario][seed] = Run(arm, scenario, seed, cell, where, sweep)
    n = int(design["power"]["n"])
    for (arm, scenario), seeds in runs.items():
        if partial and set(seeds) <= set(range(1, n + 1)):
            continue
        if sorted(seeds) != list(range(1, n + 1)):
            holder = sorted({_rel(r.sweep) for r in seeds.values()}) or [_rel(folder)]
            raise ResultsError(f"{', '.join(holder)}: arm {arm} ({scenario}) ran seeds {_spans(sorted(seeds))}; "
                               f"{_rel(path)} declares seeds 1 to {n}")
    study = Study(path, design, folder, commit, runs)
    if not partial:
        study.departures = departures(study)
    return study


def _spans(seeds: list[int]) -> str:
    """Sorted seeds as runs: ``1–12, 15``."""
    if not seeds:
        return "none"
    runs: list[list[int]] = []
    for seed in seeds:
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


# --- metrics ------------------------------------------------------------------------------------

def target(design: dict[str, Any], scenario: str) -> tuple[float, float]:
    """(F1 target, the rounds a run that never reaches it counts as) for one scenario."""
    declared = design.get("target", {}).get("f1")
    f1 = declared if declared is not None else design.get("targets", {}).get(scenario)
    texts = [str(design.get("target", {}).get("never", "")),
             str(design["metrics"].get("secondary", {}).get("rounds_to_target", ""))]
    never = next((m.group(1) for t in texts if (m := re.search(r"counts as (\d+)", t))), None)
    if f1 is None or never is None:
        raise ResultsError(f"{design['study']}: the design declares no target, or no count for a run that never "
                           f"reaches it, for scenario {scenario}")
    return float(f1), float(never)


def _curve(run: Run) -> tuple[np.ndarray, np.ndarray]:
    rows = run.cell.rows("rounds.csv")
    rounds = np.asarray([float(r["round"]) for r in rows])
    f1 = np.asarray([float(r["f1_macro_mean"]) for r in rows])
    order = np.argsort(rounds, kind="stable")
    return rounds[order], f1[order]


def value(design: dict[str, Any], metric: str, run: Run) -> float:
    """One run's value of a metric (see the module's docstring)."""
    if metric == "rounds_to_target":
        f1_target, never = target(design, run.scenario)
        rounds, f1 = _curve(run)
        reached = rounds[f1 >= f1_target]
        return float(reached[0]) if reached.size else never
    if metric == "mean_f1_over_evaluations":
        return float(_curve(run)[1].mean())
    for part in ("final", "comm", "evaluation", "algorithm_stats"):
        found = run.cell.summary.get(part, {}).get(metric)
        if isinstance(found, (int, float)):
            return float(found)
    raise ResultsError(f"{run.where}: no {metric}")


def side(study: Study, text: str, scenario: str, metric: str) -> np.ndarray:
    """One side of a hypothesis, seed 1 to n: an arm's values, or ``x - y``'s per-seed difference."""
    terms = [t.strip() for t in str(text).split(" - ")]
    seeds = range(1, int(study.design["power"]["n"]) + 1)
    values = [np.asarray([value(study.design, metric, study.runs[t, scenario][s]) for s in seeds]) for t in terms]
    return values[0] - sum(values[1:], np.zeros(len(seeds)))


# --- tests and words ----------------------------------------------------------------------------

def test(study: Study, h: dict[str, Any]) -> Row:
    """One hypothesis's paired test over the seeds."""
    a, b = (side(study, h[s], h["scenario"], h["metric"]) for s in ("a", "b"))
    diff = a - b
    sd = float(diff.std(ddof=1))
    if sd == 0.0:
        low = high = float(diff.mean())
    else:
        low, high = stats.t.interval(CONFIDENCE, diff.size - 1, loc=diff.mean(), scale=sd / math.sqrt(diff.size))
    if h["kind"] == "equivalence":
        margin = float(h["margin"])
        p = max(float(stats.ttest_1samp(diff, -margin, alternative="greater").pvalue),
                float(stats.ttest_1samp(diff, margin, alternative="less").pvalue))
    else:
        p = float(stats.ttest_rel(a, b).pvalue)
    return Row(h, diff.size, float(a.mean()), float(b.mean()), float(diff.mean()), float(low), float(high),
               1.0 if math.isnan(p) else p)


def family(design: dict[str, Any]) -> list[dict[str, Any]]:
    """The hypotheses of the one Benjamini–Hochberg family."""
    return [h for h in design["hypotheses"] if h.get("in_family", True) and h["kind"] != "descriptive"]


def tested(study: Study) -> list[Row]:
    """Every family hypothesis tested, adjusted (Benjamini–Hochberg over the family) and worded."""
    rows = [test(study, h) for h in family(study.design)]
    q = float(study.design["family"]["q"])
    adjusted = stats.false_discovery_control([r.p for r in rows], method="bh") if rows else []
    for row, p in zip(rows, adjusted):
        row.p_adjusted = float(p)
        word(row, q)
    return rows


def word(row: Row, q: float) -> None:
    """The verdict under the README's rules."""
    h = row.hypothesis
    if h["kind"] == "equivalence":
        row.shown = "claimed" if row.p_adjusted < q else ""
        row.verdict = (f"equivalent within ±{h['margin']}" if row.shown
                       else f"equivalence within ±{h['margin']} not shown")
        return
    if row.p_adjusted >= q:
        row.verdict = f"no difference of {h['delta']} or more shown"
        return
    row.shown = "claimed" if row.diff > 0 else "opposite"
    row.verdict = f"{h['a']} > {h['b']} shown" if row.diff > 0 else f"{h['b']} > {h['a']} shown, the opposite"
    if abs(row.diff) < float(h["delta"]):
        row.verdict += f" (by less than the declared {h['delta']})"


def claim_status(rows: list[Row], hypotheses: list[str]) -> str:
    """A claim's status from the hypotheses that decide it."""
    mine = [r for r in rows if r.hypothesis["id"] in hypotheses]
    if not mine:
        return "not tested: none of its hypotheses is in the family"
    detail = "; ".join(f"{r.hypothesis['id']}: {r.verdict}, {r.hypothesis['a']} − {r.hypothesis['b']} "
                       f"{_num(r.diff, max(abs(r.mean_a), abs(r.mean_b)))}, adjusted p {_p(r.p_adjusted)}"
                       for r in mine)
    if any(r.shown == "opposite" for r in mine):
        head = "not reproduced"
    elif all(r.shown == "claimed" for r in mine):
        head = ("equivalent within the margin" if all(r.hypothesis["kind"] == "equivalence" for r in mine)
                else "reproduced")
    elif any(r.shown == "claimed" for r in mine):
        head = "reproduced in part"
    elif all(r.hypothesis["kind"] == "superiority" for r in mine):
        head = "no difference of the declared delta or more shown"
    else:
        head = "not shown"
    return f"{head} ({detail})"


def claims_family(rows_by_study: dict[str, list[Row]], claims: list[dict[str, Any]], q: float) -> dict[str, str]:
    """Each decided claim's status with every hypothesis that decides a claim, across the studies
    that ran, adjusted together (Benjamini–Hochberg at ``q``, each hypothesis once): the claims
    table is one family. ``rows_by_study``: each study's tested rows (their own raw p)."""
    deciding = {(c["decided_by"]["study"], h) for c in claims if c.get("decided_by", {}).get("study") in rows_by_study
                for h in c["decided_by"]["hypotheses"]}
    members = [(study, replace(r)) for study, rows in rows_by_study.items() for r in rows
               if (study, r.hypothesis["id"]) in deciding]
    adjusted = stats.false_discovery_control([r.p for _, r in members], method="bh") if members else []
    for (_, row), p in zip(members, adjusted):
        row.p_adjusted = float(p)
        word(row, q)
    out = {}
    for c in claims:
        study = c.get("decided_by", {}).get("study")
        if study in rows_by_study:
            mine = [r for s, r in members if s == study]
            out[c["id"]] = claim_status(mine, c["decided_by"]["hypotheses"])
    return out


def statuses(table: dict[str, Any]) -> dict[str, str]:
    """claim id -> its status, for every claim of ``table`` (``studies/claims.yaml``) whose study
    has run, in the claims table's one family (``claims_family``, at the table's ``family.q``)."""
    run = sorted({c["decided_by"]["study"] for c in table["claims"] if c["status"] == "run"})
    rows = {study: tested(read_study(ROOT / "studies" / f"{study}.yaml")) for study in run}
    return claims_family(rows, table["claims"], float(table["family"]["q"]))


# --- departures ---------------------------------------------------------------------------------

def in_history(commit: str) -> bool:
    """Whether this checkout's git history holds ``commit``."""
    try:
        found = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
    except OSError:
        return False
    return found.returncode == 0


def _declared_at(study: Study) -> str | None:
    """A departure when the design at the runs' commit is not the one read now (bookkeeping aside)."""
    name = _rel(study.path)
    if not in_history(study.commit):
        raise ResultsError(f"{_rel(study.folder / 'COMMIT')}: commit {study.commit[:12]} is not in this checkout's "
                           "git history, which the check that the design preceded the runs reads")
    shown = subprocess.run(["git", "show", f"{study.commit}:{name}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        return f"`{name}` is not in the runs' commit {study.commit[:12]}: it was not declared before them"
    then = yaml.safe_load(shown.stdout)
    changed = sorted(k for k in set(then) | set(study.design)
                     if k not in BOOKKEEPING and then.get(k) != study.design.get(k))
    if changed:
        return f"`{name}` changed after the runs' commit {study.commit[:12]}: {', '.join(changed)}"
    return None


def departures(study: Study) -> list[str]:
    """Where the runs depart from the design: settings, scenario file and rounds run, per arm."""
    design, out = study.design, []
    if (declared := _declared_at(study)) is not None:
        out.append(declared)
    rounds = design["settings"].get("rounds")
    every = design["settings"].get("evaluation.every")
    for (arm, scenario), seeds in study.runs.items():
        method = design["arms"][arm]["method"]
        wanted = {k: v for k, v in design["settings"].items()
                  if not k.startswith("algorithm.") or k.split(".")[1] == method or len(k.split(".")) == 2}
        wanted.update(design["arms"][arm].get("set", {}))
        for run in seeds.values():
            wrong = [f"{k} is {_config(run.cell, k)!r}, declared {v!r}" for k, v in wanted.items()
                     if not _same(_config(run.cell, k), v)]
            evaluated = [int(r) for r in _curve(run)[0]]
            if rounds is not None and (not evaluated or evaluated[-1] != rounds):
                wrong.append(f"last evaluation at round {evaluated[-1] if evaluated else 'none'}, declared {rounds}")
            if every == 1 and rounds is not None and evaluated != list(range(1, int(rounds) + 1)):
                wrong.append("not every round evaluated")
            out += [f"arm {arm} ({scenario}) seed {run.seed}: {w}" for w in wrong]
    return out


# --- the page -----------------------------------------------------------------------------------

def _num(x: float, scale: float = 0.0) -> str:
    """A number to the digits its metric's scale warrants (``scale``: the largest mean shown with it)."""
    if math.isnan(x):
        return "–"
    digits = 1 if scale >= 10 else 2 if scale >= 1 else 4
    return f"{x:.{digits}f}".replace("-", "−")


def _p(x: float) -> str:
    return f"{x:.3g}"


def _metrics(design: dict[str, Any]) -> list[str]:
    """The primary metric, then the declared secondary ones this script computes, in order."""
    primary = re.match(r"[a-z0-9_]+", design["metrics"]["primary"])
    names = [primary.group(0)] if primary else []
    return names + [m for m in design["metrics"].get("secondary", {}) if m not in names]


def _computable(study: Study, metric: str, arm: str | None = None, scenario: str | None = None) -> bool:
    """Whether the script computes ``metric`` for the runs: one arm's (with ``arm`` and
    ``scenario``), else the first arm's."""
    if metric in ARM_METRICS:
        return True
    runs = study.runs[arm, scenario] if arm is not None else next(iter(study.runs.values()))
    try:
        value(study.design, metric, next(iter(runs.values())))
    except ResultsError:
        return False
    return True


def hypothesis_lines(study: Study, rows: list[Row]) -> list[str]:
    design = study.design
    out = ["| id | claim | test | metric | a | b | mean a | mean b | a − b [95 % CI] | p | adjusted p | verdict |",
           "|---" * 12 + "|"]
    for r in rows:
        h = r.hypothesis
        test_text = (f"TOST, margin ±{h['margin']}" if h["kind"] == "equivalence"
                     else f"two-sided paired t, a > b declared, delta {h['delta']}")
        scale = max(abs(r.mean_a), abs(r.mean_b))
        out.append(f"| {h['id']} | {h['claim']} | {test_text} | {h['metric']} | {h['a']} | {h['b']} "
                   f"| {_num(r.mean_a, scale)} | {_num(r.mean_b, scale)} | {_num(r.diff, scale)} "
                   f"[{_num(r.low, scale)}, {_num(r.high, scale)}] "
                   f"| {_p(r.p)} | {_p(r.p_adjusted)} | **{r.verdict}** |")
    return out + ["", f"n = {design['power']['n']} seeds per test, paired by seed; Benjamini–Hochberg over the "
                  f"family of m = {len(rows)} ({', '.join(r.hypothesis['id'] for r in rows)}), "
                  f"q = {design['family']['q']}."]


def arm_lines(study: Study, scenario: str) -> list[str]:
    """Every arm's mean [95 % CI] over seeds of every metric, tested or described."""
    design = study.design
    metrics = [m for m in _metrics(design) if _computable(study, m)]
    out = ["| arm | method | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for arm, spec in design["arms"].items():
        cells = []
        for metric in metrics:
            if metric == "best_round":
                cells.append(f"round {best_round(study.runs[arm, scenario])}")
                continue
            x = np.asarray([value(design, metric, r) for r in study.runs[arm, scenario].values()])
            cell = _shown(x)
            if metric == "rounds_to_target":
                never = int(np.sum(x == target(design, scenario)[1]))
                cell += f", {never} of {x.size} never" if never else ""
            cells.append(cell)
        out.append(f"| {arm} | `{spec['method']}` | " + " | ".join(cells) + " |")
    left = [m for m in _metrics(design) if m not in metrics]
    return out + (["", f"Declared but not computed by this script: {', '.join(left)}."] if left else [])


def best_round(runs: dict[int, Run]) -> int:
    """The evaluated round where the arm's mean ``f1_macro_mean`` over its seeds is highest (the
    earliest on a tie)."""
    curves = [_curve(r) for r in runs.values()]
    rounds = curves[0][0]
    if any(not np.array_equal(c[0], rounds) for c in curves):
        raise ResultsError(f"{next(iter(runs.values())).where}: the arm's seeds were evaluated at different rounds")
    mean = np.mean([c[1] for c in curves], axis=0)
    return int(rounds[int(np.argmax(mean))])


def _mean_ci(x: np.ndarray) -> tuple[float, float, float]:
    if x.size < 2 or x.std() == 0:
        return float(x.mean()), float(x.mean()), float(x.mean())
    low, high = stats.t.interval(CONFIDENCE, x.size - 1, loc=x.mean(), scale=x.std(ddof=1) / math.sqrt(x.size))
    return float(x.mean()), float(low), float(high)


def _shown(x: np.ndarray) -> str:
    mean, low, high = _mean_ci(x)
    scale = abs(mean)
    return f"{_num(mean, scale)} [{_num(low, scale)}, {_num(high, scale)}]"


def described_lines(study: Study, scenario: str) -> list[str]:
    """Each descriptive hypothesis: its arms' mean [95 % interval] over seeds, and with
    ``ratio_to`` the mean of each seed's ratio to that arm."""
    design, seeds = study.design, range(1, int(study.design["power"]["n"]) + 1)
    out: list[str] = []
    for h in (h for h in design["hypotheses"] if h["kind"] == "descriptive"):
        ref = h.get("ratio_to")
        out += ["", f"{h['id']} ({h['claim']}): `{h['metric']}`, described, not tested.", "",
                "| arm | mean [95 % CI] |" + (f" per-seed ratio to {ref} [95 % CI] |" if ref else ""),
                "|---|---|" + ("---|" if ref else "")]
        per_arm = {a: np.asarray([value(design, h["metric"], study.runs[a, scenario][s]) for s in seeds])
                   for a in h["arms"]}
        for arm, x in per_arm.items():
            out.append(f"| {arm} | {_shown(x)} |" + (f" {_shown(x / per_arm[ref])} |" if ref else ""))
    return out


def best_lines(study: Study, scenario: str) -> list[str]:
    """The declared best configuration: the arm among ``among`` with the highest mean primary metric."""
    best = study.design.get("best_configuration")
    if not isinstance(best, dict) or "among" not in best:
        return []
    metric = _metrics(study.design)[0]
    means = {a: float(np.mean([value(study.design, metric, r) for r in study.runs[a, scenario].values()]))
             for a in best["among"]}
    top = max(means, key=lambda a: means[a])
    ranked = ", ".join(f"{a} {_num(m)}" for a, m in sorted(means.items(), key=lambda kv: -kv[1]))
    return ["", f"Best configuration (declared rule, described, not tested): **{top}**, by mean {metric} "
            f"({ranked})."]


def convergence_lines(study: Study, scenario: str) -> list[str]:
    """Whether each arm converged under the declared rule, and its plan under its bound."""
    rule = study.design.get("convergence")
    if not isinstance(rule, dict) or "tolerance" not in rule:
        return []
    (l0, l1), (e0, e1), tol = rule["last_rounds"], rule["earlier_rounds"], float(rule["tolerance"])
    out = ["", f"Convergence (declared rule: every seed's mean F1 over rounds {l0}–{l1} within {tol} of its "
               f"mean over rounds {e0}–{e1}):", ""]
    for arm in study.design["arms"]:
        moves = np.asarray([_window_mean(r, l0, l1) - _window_mean(r, e0, e1)
                            for r in study.runs[arm, scenario].values()])
        moved = int(np.sum(np.abs(moves) >= tol))
        verdict = ("converged" if moved == 0 else
                   f"**not converged**: {moved} of {moves.size} seeds moved by {tol} or more")
        line = f"- {arm}: {verdict} (largest change {_num(float(moves[np.argmax(np.abs(moves))]))})"
        plan = rule.get("plan_metric")
        if plan is not None and _computable(study, plan, arm, scenario):
            x = np.asarray([value(study.design, plan, r) for r in study.runs[arm, scenario].values()])
            under = float(x.mean()) < float(rule["plan_below"])
            line += (f"; mean {plan} {_num(float(x.mean()))}, "
                     + ("under" if under else "**not under**") + f" {rule['plan_below']}")
        out.append(line)
    return out


def _window_mean(run: Run, first: int, last: int) -> float:
    rounds, f1 = _curve(run)
    inside = (rounds >= first) & (rounds <= last)
    if not inside.any():
        raise ResultsError(f"{run.where}: no evaluation between rounds {first} and {last}")
    return float(f1[inside].mean())


def page(study: Study) -> str:
    design, rows = study.design, tested(study)
    name, rel = design["study"], _rel(study.path)
    tested_metrics = {h["metric"] for h in family(design)}
    described = [m for m in _metrics(design) if m not in tested_metrics]
    out = [f"# Results: {name}", "",
           f"Generated by `python bench/study_results.py {rel}` from this folder; do not edit. The design, "
           f"declared before the runs: [`{rel}`](../../../studies/{study.path.stem}.md).", "",
           f"All runs from one commit, `{study.commit}` (`COMMIT`; every run's `summary.json` records it, with a "
           "clean tree). They are reproduced, from a clean checkout of that commit, by", "",
           f"    python bench/study_sweeps.py --run {rel} --workers 2", "",
           f"and this page by `python bench/study_results.py {rel}` (`--check` to test it).", "",
           "## Hypotheses", ""]
    out += hypothesis_lines(study, rows)
    out += ["", "Verdicts: a superiority test reads \"a > b shown\" only where its adjusted p is under q, and "
            "\"no difference of delta or more shown\" otherwise; \"equivalent\" only where TOST rejects at the stated "
            "margin.", "", "## Claims decided", ""]
    claims = study_power.load(ROOT / "studies" / "claims.yaml")["claims"]
    for c in claims:
        if c.get("decided_by", {}).get("study") == name:
            status = claim_status(rows, c["decided_by"]["hypotheses"])
            out.append(f"- `{c['id']}` ({c['paper']}, {c['where']}): {status}")
    for scenario in design["scenarios"]:
        out += ["", f"## Every arm, scenario {scenario}", "",
                f"Mean over the {design['power']['n']} seeds [95 % t interval]. Tested above: "
                f"{', '.join(sorted(tested_metrics))}; described, not tested: {', '.join(described) or 'none'}.", ""]
        out += arm_lines(study, scenario)
        out += described_lines(study, scenario) + best_lines(study, scenario) + convergence_lines(study, scenario)
    out += ["", "## Departures from the design", ""]
    out += [f"- {d}" for d in study.departures] or ["None: every run has the declared settings, scenario, rounds and "
                                                   "evaluations, seeds 1 to n, from one commit at which the design "
                                                   "was already committed as it reads now (its `status` aside)."]
    return "\n".join(out) + "\n"


def progress_page(study: Study) -> str:
    """A running study's page: which runs are in, per arm and scenario, and nothing of their
    results (a study is read once, when every declared run is in: no look at interim results
    decides when it stops)."""
    design, rel = study.design, _rel(study.path)
    n = int(design["power"]["n"])
    done = sum(len(seeds) for seeds in study.runs.values())
    out = [f"# In progress: {design['study']}", "",
           f"Generated by `python bench/study_results.py {rel}` from this folder; do not edit. The design, "
           f"declared before the runs: [`{rel}`](../../../studies/{study.path.stem}.md).", "",
           f"**{done} of {len(study.runs) * n} runs are in**, all from commit `{study.commit}` (`COMMIT`). No result "
           "is read or shown until every declared run is in: the study is analysed once, as declared.", "",
           "Continue it from a clean checkout of that commit, with this folder copied into it (finished runs "
           "are kept, never re-run):", "",
           f"    git worktree add ../{design['study']}-runs {study.commit}",
           f"    cp -r {_rel(study.folder)} ../{design['study']}-runs/{_rel(study.folder.parent)}/",
           f"    cd ../{design['study']}-runs && python bench/study_sweeps.py --run {rel} --workers 2", "",
           "| scenario | arm | seeds in |", "|---|---|---|"]
    for (arm, scenario), seeds in study.runs.items():
        out.append(f"| {scenario} | {arm} | {_spans(sorted(seeds))} of 1–{n} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("designs", type=Path, nargs="+", help="study design files with results")
    parser.add_argument("--results", type=Path, help="the results folder (one design only; default: its own)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a committed page differs")
    args = parser.parse_args(argv)
    if args.results is not None and len(args.designs) != 1:
        parser.error("--results goes with one design")
    stale = []
    for path in args.designs:
        try:
            running = study_power.load(path).get("status") == "running"
            study = read_study(path, args.results, partial=running)
            text = progress_page(study) if running else page(study)
        except (ResultsError, OSError) as err:
            print(f"study_results: {err}", file=sys.stderr)
            return 2
        target_page = study.folder / "README.md"
        if args.check:
            stale += [] if target_page.is_file() and target_page.read_text() == text else [_rel(target_page)]
        else:
            target_page.write_text(text)
    if stale:
        print(f"stale results pages (run python bench/study_results.py): {', '.join(stale)}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
