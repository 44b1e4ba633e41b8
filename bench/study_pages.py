"""The human-readable pages of the study designs and of the claims table, from their YAML files.

Writes ``studies/<study>.md`` for each design and ``studies/claims.md``; ``--check`` writes
nothing and exits 1 when a committed page differs from what its YAML gives.

    python bench/study_pages.py
    python bench/study_pages.py --check
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import study_power
import study_results
from generated_files import write_or_check

from p2pfed.scenario.fields import yaml_text

STUDIES = study_power.ROOT / "studies"


def designs() -> list[Path]:
    return sorted(p for p in STUDIES.glob("*.yaml") if p.name != "claims.yaml")


def claims() -> dict[str, Any]:
    return study_power.load(STUDIES / "claims.yaml")


def _runs(design: dict[str, Any]) -> str:
    """Whether the study's results folder holds its runs yet, with a link to its results page."""
    page = study_results.page_path(design)
    if design.get("status") == "running" and page.is_file():
        where = page.parent.relative_to(study_power.ROOT)
        return f"running, across sessions: progress in [`{where}`](../{where}/README.md)"
    if study_results.has_results(design) and page.is_file():
        where = page.parent.relative_to(study_power.ROOT)
        return f"run: results in [`{where}`](../{where}/README.md)"
    folder = design.get("results")
    if folder and (study_power.ROOT / folder / "sweep.csv").exists():
        return f"run: results in `{folder}`"
    return "no run yet"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _test(h: dict[str, Any]) -> str:
    if h["kind"] == "equivalence":
        return f"TOST, margin ±{h['margin']}"
    if h["kind"] == "superiority":
        return f"{h['a']} > {h['b']}, delta {h['delta']}"
    return "described, no test"


def _hypotheses(design: dict[str, Any], quoted: dict[str, dict[str, Any]]) -> list[str]:
    seeds = {need.hypothesis: need for need in study_power.needs(design)}
    lines = ["| id | claim (quoted) | scenario | test | metric | sd used | n for it |",
             "|---|---|---|---|---|---|---|"]
    for h in design["hypotheses"]:
        claim = quoted[h["claim"]]
        need = seeds.get(h["id"])
        sd, n = (f"{need.sd:.4g} ({need.variance})", str(need.n)) if need else ("–", "–")
        test = _test(h) if h["kind"] != "equivalence" else f"{h['a']} ≈ {h['b']}, {_test(h)}"
        lines.append(f"| {h['id']} | \"{_cell(claim['quote'])}\" ({claim['where']}) | {h.get('scenario', 'all')} "
                     f"| {_cell(test)} | {h['metric']} | {sd} | {n} |")
    return lines


DECLARED = ("depth", "targets", "target", "convergence", "best_configuration")


def _declarations(design: dict[str, Any]) -> list[str]:
    """The design's other declarations (depth, targets, convergence rule, best configuration)."""
    out = []
    for key in (k for k in DECLARED if k in design):
        out += ["", f"## {key.replace('_', ' ').capitalize()}", ""]
        value = design[key]
        items = value.items() if isinstance(value, dict) else [("", value)]
        for name, item in items:
            if isinstance(item, list) and not any(isinstance(q, dict) for q in item):
                out.append(f"- {name}: " + ", ".join(f"`{q}`" for q in item))
            elif isinstance(item, list):
                out += [f"- {name}: \"{_cell(q['quote'])}\" ({q['where']})" for q in item]
            else:
                out.append(f"- {name + ': ' if name else ''}{_cell(item)}")
    return out


def _attack(kind: str, options: dict[str, Any]) -> str:
    return f"`{kind}`" + (f" ({', '.join(f'{o}: {v}' for o, v in options.items())})" if options else "")


def matrix_page(path: Path, design: dict[str, Any]) -> str:
    """A matrix design's page: every defence against every attack at every fraction, one
    hypothesis tested in each cell."""
    plan, family = design["power"], design["family"]
    (need,) = study_power.needs(design)
    n = study_power.design_n(design)
    out = [f"# Study design: {design['study']}", "",
           f"Status: **{design['status']}** ({_runs(design)}). Generated from `studies/{path.name}` by "
           "`python bench/study_pages.py`; the YAML is the declaration.", "",
           design["one_commit"], "", "## Question", "", design["question"], "",
           "## The matrix", "",
           f"- Sweep: `{design['sweep']}`, into `{design['results']}`; scenario `{design['scenario']}`, "
           "methods " + ", ".join(f"`{m}`" for m in design["methods"])
           + f", seeds 1 to {n}; analysed by `{design['analysis']}`.",
           "- Settings: " + ", ".join(f"`{k}: {yaml_text(v)}`" for k, v in design["settings"].items()) + ".",
           "- Defences (`algorithm.robust`): " + ", ".join(f"`{d}`" for d in design["defences"]) + ".",
           "- Attacks: " + ", ".join(_attack(k, opts) for k, opts in design["attacks"].items()) + ".",
           "- Fractions of liars: " + ", ".join(f"{round(100 * f)} %" for f in design["fractions"])
           + f"; each with every defence, and every defence without liars: "
           f"{len(design['defences']) * (len(design['attacks']) * len(design['fractions']) + 1)} configurations.",
           f"- Reference: {design['reference']}."]
    if "cut_before_the_runs" in design:
        out += ["", "## Cut before the runs", "", design["cut_before_the_runs"]]
    out += ["", "## Not in this study", ""]
    out += [f"- {item}" for item in design["not_in_this_study"]]
    out += ["", "## Metrics", "", f"- Primary: {design['metrics']['primary']}."]
    out += [f"- `{k}`: {v}." for k, v in design["metrics"].get("secondary", {}).items()]
    out += ["", "## Hypotheses: one Benjamini–Hochberg family per method", "",
            f"{family['members']}; q = {family['q']}.", "",
            "| id | cells | a | b | test | metric | sd used | n for it | power at n |", "|---" * 9 + "|"]
    for h in design["hypotheses"]:
        out.append(f"| {h['id']} | {_cell(h['cells'])} | {_cell(h['a'])} | {_cell(h['b'])} | {_cell(h['test'])} "
                   f"(margin ±{h['margin']}) | {h['metric']} | {need.sd:.4g} ({need.variance}) | {need.n} "
                   f"| {study_power.power_at(need, n):.2f} at alpha {need.alpha:.2e} |")
    out += ["", "## Reading the results, declared", ""] + [f"- {r}" for r in design["reading"]]
    out += ["", "## Effect sizes and margins", ""] + [f"- {k}: {v}" for k, v in design["effect_sizes"].items()]
    out += ["", "## Seeds", "",
            f"n = **{n}** seeds, a pilot: {_cell(plan['pilot']['why'])}" if "pilot" in plan else f"n = **{n}** seeds.",
            "", f"Power {plan['power']}; alpha per test: {plan['alpha']}; {plan['method']}. Variance source (the SD "
            "of the seed-paired differences, the largest over the pairs):", ""]
    for name, source in plan["variance"].items():
        pairs = "; ".join(f"{yaml_text(p['a'])} − {yaml_text(p['b'])}" for p in source["pairs"])
        out.append(f"- `{name}`: `{source['file']}`, column `{source['column']}`, "
                   f"rows {yaml_text(source.get('where', 'all'))}: {pairs}")
    out += [f"- {note}" for note in plan.get("variance_notes", [])]
    out += ["", f"Reproduce: `python bench/study_power.py --check studies/{path.name}`", ""]
    return "\n".join(out)


def design_page(path: Path) -> str:
    design = study_power.load(path)
    if design.get("design") == "matrix":
        return matrix_page(path, design)
    quoted = {c["id"]: c for c in claims()["claims"]}
    plan = design["power"]
    out = [f"# Study design: {design['study']}", "",
           f"Status: **{design['status']}** ({_runs(design)}). Generated from `studies/{path.name}` by "
           "`python bench/study_pages.py`; the YAML is the declaration.", "",
           design["one_commit"], "", "## Scenarios and settings", ""]
    out += [f"- `{name}`: `{file}`" for name, file in design["scenarios"].items()]
    out += ["", "| setting | value |", "|---|---|"]
    out += [f"| `{k}` | `{_cell(yaml_text(v))}` |" for k, v in design["settings"].items()]
    out += ["", "## Arms", "", "| arm | method | settings |", "|---|---|---|"]
    for arm, spec in design["arms"].items():
        sets = ", ".join(f"`{k}: {yaml_text(v)}`" for k, v in spec.get("set", {}).items()) or "–"
        out.append(f"| {arm} | `{spec['method']}` | {sets} |")
    if design.get("to_add"):
        out += ["", "## To add before the run", ""]
        out += [f"- `{t['name']}` ({t['kind']}): {t['paper']}. Read: {t['read']}." for t in design["to_add"]]
    if design.get("added"):
        out += ["", "## Added to p2pfed for this study", ""]
        out += [f"- `{t['name']}` ({t['kind']}): {t['paper']}. Read: {t['read']}."
                + (f" {t['note']}." if "note" in t else "") for t in design["added"]]
    out += _declarations(design)
    out += ["", "## Departures from the paper, declared", ""] + [f"- {d}" for d in design.get("departures", [])]
    out += ["", "## Metrics", "", f"- Primary: {design['metrics']['primary']}."]
    out += [f"- `{k}`: {v}." for k, v in design["metrics"].get("secondary", {}).items()]
    out += ["", "## Hypotheses: one Benjamini–Hochberg family", "",
            f"Every hypothesis but the descriptive ones is one family, q = {design['family']['q']}.", ""]
    out += _hypotheses(design, quoted)
    out += ["", "## Effect sizes and margins", ""]
    out += [f"- {k}: {v}" for k, v in design.get("effect_sizes", {}).items()]
    out += ["", "## Seeds from a power analysis", "",
            f"n = **{plan['n']}** seeds, seeds 1 to {plan['n']} (at least {plan['min_seeds']}); power {plan['power']}; "
            f"alpha per test: {plan['alpha']}; {plan['method']}. Variance sources (the SD of the "
            "seed-paired differences, the largest over the pairs):", ""]
    for name, source in plan["variance"].items():
        pairs = "; ".join(f"{yaml_text(p['a'])} − {yaml_text(p['b'])}" for p in source["pairs"])
        extra = f", target {source['target']}" if "target" in source else ""
        out.append(f"- `{name}`: `{source['file']}`, column `{source['column']}`{extra}, "
                   f"rows {yaml_text(source.get('where', 'all'))}: {pairs}")
    out += [f"- {note}" for note in plan.get("variance_notes", [])]
    out += ["", f"Reproduce: `python bench/study_power.py --check studies/{path.name}`", ""]
    return "\n".join(out)


def _status(claim: dict[str, Any], decided: dict[str, str]) -> str:
    """A claim's status: its study's result where the study has run (``status: run``), else as declared."""
    if claim["status"] != "run":
        return _cell(claim["status"])
    study = claim["decided_by"]["study"]
    folder = study_results.results_folder(study_power.load(STUDIES / f"{study}.yaml")).relative_to(study_power.ROOT)
    return f"**{_cell(decided[claim['id']])}** ([results](../{folder}/README.md))"


def claims_page() -> str:
    table = claims()
    out = ["# Claims table: every headline claim of the five seed papers", "",
           "Generated from `studies/claims.yaml` by `python bench/study_pages.py`. A claim whose study has run "
           "takes its status from that study's results, as `bench/study_results.py` tests them (the seed the "
           f"unit); the table is one family: {_cell(table['family']['members'])}, adjusted together by "
           f"Benjamini–Hochberg at q = {table['family']['q']} (each study's own page keeps its declared family). "
           "The others are declared before their runs. Each quote is exactly as the paper's text gives it "
           "(\" … \" joins fragments where the text extraction broke a symbol).", "",
           "| paper | where | claim | status | decided by |", "|---|---|---|---|---|"]
    decided = study_results.statuses(table)
    for c in table["claims"]:
        by_study = c.get("decided_by")
        by = f"[{by_study['study']}]({by_study['study']}.md): {', '.join(by_study['hypotheses'])}" if by_study else "–"
        note = f" ({_cell(c['note'])})" if "note" in c else ""
        out.append(f"| {c['paper']} | {c['where']} | \"{_cell(c['quote'])}\" | {_status(c, decided)}{note} | {by} |")
    out += ["", "Papers:", ""] + [f"- `{k}`: {v}" for k, v in table["papers"].items()] + [""]
    return "\n".join(out)


def pages() -> dict[Path, str]:
    out = {STUDIES / f"{p.stem}.md": design_page(p) for p in designs()}
    out[STUDIES / "claims.md"] = claims_page()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page is stale")
    args = parser.parse_args(argv)
    return write_or_check(pages(), args.check, "python bench/study_pages.py")


if __name__ == "__main__":
    sys.exit(main())
