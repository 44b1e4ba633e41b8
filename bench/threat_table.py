"""The README's threat table, from the attack matrices' seed-level tests.

Reads each matrix study's ``tests.csv`` (``studies/adversaries-adaptive.yaml``,
``adversaries-more.yaml`` and ``adversaries-fedsub-own.yaml``; written by
``bench/adversaries_tests.py ... --holds tost`` into the study's results folder) and writes,
``bench/results/threat-tables.md``: which defence holds against which attack up to which share
of liars (it holds at that fraction and at every smaller one tested), a table per method with
the attacks of every study side by side (n/a where a method cannot meet an attack), and what no
defence is shown to stop; and between the README's ``threat-table`` markers, its summary per
defence and method. Each study's tests are adjusted apart, per method.

    python bench/threat_table.py           # rewrites both
    python bench/threat_table.py --check   # exit 1 when either differs
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import yaml
from generated_files import with_block, write_or_check

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TABLES = ROOT / "bench" / "results" / "threat-tables.md"
STUDIES = [ROOT / "studies" / f"{name}.yaml"
           for name in ("adversaries-adaptive", "adversaries-more", "adversaries-fedsub-own")]
BEGIN, END = "<!-- threat-table: begin (python bench/threat_table.py) -->", "<!-- threat-table: end -->"
ALPHA = 0.05
MARGIN = 0.05   # the design's equivalence margin (F1)
DEVICES = 12   # the matrix's scenario


def read_holds(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["test"].startswith("holds")]
    if not rows or "TOST" not in rows[0]["test"]:
        raise SystemExit(f"{path}: no TOST holds tests (run bench/adversaries_tests.py with --holds tost)")
    return rows


def _held(row: dict[str, str]) -> bool:
    return row["p_adjusted"] != "" and float(row["p_adjusted"]) < ALPHA


def _by_fraction(rows: list[dict[str, str]]) -> dict[tuple[str, str], dict[int, dict[str, str]]]:
    """(defence, attack kind) -> fraction (%) -> its holds row."""
    by: dict[tuple[str, str], dict[int, dict[str, str]]] = {}
    for r in rows:
        if r["attack"] != "none":
            kind, percent, _ = r["attack"].rsplit(" ", 2)
            by.setdefault((r["defence"], kind), {})[int(percent)] = r
    return by


def up_to(rows: list[dict[str, str]]) -> dict[tuple[str, str], int]:
    """(defence, attack kind) -> the largest fraction (%) up to which it holds at every fraction
    tested (0: not shown to hold at the smallest)."""
    out = {}
    for key, found in _by_fraction(rows).items():
        reached = 0
        for percent in sorted(found):
            if not _held(found[percent]):
                break
            reached = percent
        out[key] = reached
    return out


def above(rows: list[dict[str, str]]) -> dict[tuple[str, str], list[int]]:
    """(defence, attack kind) -> the fractions (%) where the honest F1's mean difference from the
    clean run is above +MARGIN (not equivalent, but not a loss)."""
    return {key: [p for p in sorted(found) if float(found[p]["f1_diff"]) > MARGIN]
            for key, found in _by_fraction(rows).items()}


def declared_order() -> tuple[list[str], list[str], list[str], list[float]]:
    """The studies' methods, defences, attack kinds and fractions of liars, in their order (the
    first study's methods, defences and fractions; every study's attacks)."""
    designs = [yaml.safe_load(path.read_text()) for path in STUDIES]
    first = designs[0]
    kinds = [k for design in designs for k in design["attacks"]]
    return list(first["methods"]), list(first["defences"]), kinds, list(first["fractions"])


def read_studies() -> list[dict[str, str]]:
    """Every study's holds rows, each marked with its study (the first study's runs without liars
    only: each study has its own)."""
    rows = []
    for i, path in enumerate(STUDIES):
        design = yaml.safe_load(path.read_text())
        rows += [{**r, "study": design["study"]} for r in read_holds(ROOT / design["results"] / "tests.csv")
                 if i == 0 or r["attack"] != "none"]
    return rows


def liars_at(fractions: list[float]) -> dict[int, int]:
    """Share of liars (%) -> liars among the scenario's devices."""
    return {round(100 * f): max(1, round(f * DEVICES)) for f in fractions}


def without_liars(rows: list[dict[str, str]], defence: str) -> str:
    """Whether ``defence`` alone is level with the weighted mean (one method's rows)."""
    clean = {r["defence"]: _held(r) for r in rows if r["attack"] == "none"}
    return "–" if defence == "none" else ("level" if clean.get(defence) else "not shown level")


def _above(percents: list[int]) -> str:
    return f" (above the clean run at {', '.join(str(p) for p in percents)} %)" if percents else ""


def method_table(rows: list[dict[str, str]], defences: list[str], kinds: list[str],
                 liars: dict[int, int]) -> list[str]:
    """One method's table (a line per defence, a column per attack) and what nothing stops."""
    reach, high = up_to(rows), above(rows)
    families = {r["study"]: r["comparisons"] for r in rows}
    out = [f"**{rows[0]['method']}** (Benjamini–Hochberg over its "
           + " and ".join(f"{n} tests in `{study}`" for study, n in families.items()) + "):", "",
           "| defence | no liars | " + " | ".join(f"`{k}`" for k in kinds) + " |",
           "|---|---|" + "---|" * len(kinds)]
    met = {k for (_, k) in reach}
    for d in defences:
        cells = [("n/a" if k not in met else (f"up to {reach[(d, k)]} %" if reach.get((d, k)) else "–")
                  + _above(high.get((d, k), []))) for k in kinds]
        out.append(f"| `{d}` | {without_liars(rows, d)} | " + " | ".join(cells) + " |")
    stopped = {(k, p) for (d, k) in reach for p in liars if p <= reach[(d, k)]}
    unstopped = [f"`{k}` at {p} %" for k in kinds if k in met for p in liars if (k, p) not in stopped]
    return out + ["", "Nothing here is shown to stop: " + (", ".join(unstopped) if unstopped else "–") + ".", ""]


def _definitions(rows: list[dict[str, str]], liars: dict[int, int]) -> str:
    seeds = sorted({int(r["seeds"]) for r in rows})
    return (f"{DEVICES} synthetic devices on a complete graph, 20 rounds; liars at "
            f"{' and '.join(f'{p} %' for p in liars)} ({' and '.join(str(n) for n in liars.values())} of {DEVICES}). "
            "A defence **holds** against an attack up to a share of liars when, there and at every smaller share "
            f"tested, the honest devices' final F1 stays within ±{MARGIN} of the run with neither liars nor defence "
            f"(TOST, the seed the unit, {' or '.join(str(n) for n in seeds)} seeds, Benjamini–Hochberg over each "
            f"method's tests in each study, adjusted p < {ALPHA}). Not shown to hold is not *fails*. "
            "Ditto's F1 is its personal model's.")


def _sources() -> str:
    return ("Designs and results, with the commands: "
            + "; ".join(f"[studies/{p.stem}.md](studies/{p.stem}.md), [bench/results/{p.stem}/]"
                        f"(bench/results/{p.stem}/README.md)" for p in STUDIES) + ".")


def tables_page(rows: list[dict[str, str]]) -> str:
    """Every method's table, attack by attack (``TABLES``)."""
    methods, defences, kinds, fractions = declared_order()
    liars = liars_at(fractions)
    out = ["# Which defence holds against which attack", "",
           "Generated by `python bench/threat_table.py` from the matrices' `tests.csv`; the README's threat "
           "table summarises it.", "", _definitions(rows, liars).replace("](", "](../../"), "",
           f"– means *not shown to hold* at {min(liars)} %; *above the clean run*: the mean difference is above "
           f"+{MARGIN} there (not equivalent, so not counted as holding; described, not tested); n/a: the method "
           "cannot meet that attack.", ""]
    for method in methods:
        mine = [r for r in rows if r["method"] == method]
        if mine:
            out += method_table(mine, defences, kinds, liars)
    return "\n".join(out + [_sources().replace("](", "](../../"), ""])


def section(rows: list[dict[str, str]]) -> str:
    """The README's summary: per defence and method, whether it is level without liars and how
    many of the attacks the method meets it holds against at each share; what nothing stops."""
    methods, defences, kinds, fractions = declared_order()
    liars = liars_at(fractions)
    per_method = {m: [r for r in rows if r["method"] == m] for m in methods}
    reach = {m: up_to(mine) for m, mine in per_method.items() if mine}
    out = [BEGIN, "", _definitions(rows, liars) + " "
           "Each cell: *level* or not without liars; then against how many of the attacks the method meets it "
           f"holds at {' and up to '.join(f'{p} %' for p in liars)}. The attacks: "
           + ", ".join(f"`{k}`" for k in kinds) + " (the last two FedSub's own).", "",
           "| defence | " + " | ".join(reach) + " |", "|---|" + "---|" * len(reach)]
    met = {m: {k for (_, k) in held} for m, held in reach.items()}
    for d in defences:
        cells = [f"{without_liars(per_method[m], d)} · "
                 + " · ".join(f"{sum(1 for k in met[m] if held.get((d, k), 0) >= p)}/{len(met[m])}" for p in liars)
                 for m, held in reach.items()]
        out.append(f"| `{d}` | " + " | ".join(cells) + " |")
    unstopped = {}
    for m, held in reach.items():
        stopped = {k for (d, k) in held if held[(d, k)] >= max(liars)}
        unstopped[m] = ", ".join(f"`{k}`" for k in kinds if k in met[m] and k not in stopped) or "–"
    out += ["", f"Nothing here is shown to stop at {max(liars)} %: "
            + "; ".join(f"on {m}, {text}" for m, text in unstopped.items()) + ".",
            "", "Attack by attack: [bench/results/threat-tables.md](bench/results/threat-tables.md). Not in these "
            "matrices: SAFL ([docs/results.md](docs/results.md)). A Sybil's forged copies are refused with "
            "signatures on, over simulated contacts and between real peers "
            "([docs/explanation/defences.md](docs/explanation/defences.md)).", "", END]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs")
    args = parser.parse_args(argv)
    rows = read_studies()
    wanted = {README: with_block(README.read_text(), BEGIN, END, section(rows)), TABLES: tables_page(rows)}
    return write_or_check(wanted, args.check, "python bench/threat_table.py")


if __name__ == "__main__":
    sys.exit(main())
