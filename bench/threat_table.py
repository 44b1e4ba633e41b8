"""The README's threat table, from the adaptive-attack matrix's seed-level tests.

Reads ``bench/results/adversaries-adaptive/tests.csv`` (written by ``bench/adversaries_tests.py
... --holds tost``) and writes, between the README's ``threat-table`` markers, which defence
holds against which attack up to which share of liars (it holds at that fraction and at every
smaller one tested), what no defence is shown to stop, and what the matrix does not cover yet.

    python bench/threat_table.py           # rewrites the README's section
    python bench/threat_table.py --check   # exit 1 when the README's section differs
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "bench" / "results" / "adversaries-adaptive" / "tests.csv"
README = ROOT / "README.md"
DESIGN = ROOT / "studies" / "adversaries-adaptive.yaml"
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


def declared_order() -> tuple[list[str], list[str], list[float]]:
    """The design's defences, attack kinds and fractions of liars, in its order."""
    design = yaml.safe_load(DESIGN.read_text())
    return list(design["defences"]), list(design["attacks"]), list(design["fractions"])


def _above(percents: list[int]) -> str:
    return f" (above the clean run at {', '.join(str(p) for p in percents)} %)" if percents else ""


def section(rows: list[dict[str, str]]) -> str:
    reach, high = up_to(rows), above(rows)
    defences, kinds, fractions = declared_order()
    liars = {round(100 * f): max(1, round(f * DEVICES)) for f in fractions}
    clean = {r["defence"]: _held(r) for r in rows if r["attack"] == "none"}
    seeds = sorted({int(r["seeds"]) for r in rows})
    out = [BEGIN, "",
           f"Gossip averaging, {DEVICES} synthetic devices on a complete graph, 20 rounds; liars at "
           f"{' and '.join(f'{p} %' for p in liars)} ({' and '.join(str(n) for n in liars.values())} of {DEVICES}). "
           "A defence **holds** against an attack up to a "
           f"share of liars when, there and at every smaller share tested, the honest devices' final F1 stays "
           f"within ±0.05 of the run with neither liars nor defence (TOST, the seed the unit, {seeds[-1]} seeds, "
           f"Benjamini–Hochberg over {rows[0]['comparisons']} tests, adjusted p < {ALPHA}). Five seeds are a "
           "pilot: – means *not shown to hold* at 10 %, not *fails*; *above the clean run*: the mean difference "
           f"is above +{MARGIN} there (not equivalent, so not counted as holding; described, not tested).", "",
           "| defence | no liars | " + " | ".join(f"`{k}`" for k in kinds) + " |",
           "|---|---|" + "---|" * len(kinds)]
    for d in defences:
        cost = "–" if d == "none" else ("level" if clean.get(d) else "not shown level")
        cells = [(f"up to {reach[(d, k)]} %" if reach.get((d, k)) else "–") + _above(high.get((d, k), []))
                 for k in kinds]
        out.append(f"| `{d}` | {cost} | " + " | ".join(cells) + " |")
    stopped = {(k, p) for (d, k) in reach for p in liars if p <= reach[(d, k)]}
    unstopped = [f"`{k}` at {p} %" for k in kinds for p in liars if (k, p) not in stopped]
    out += ["", "Nothing here is shown to stop: " + (", ".join(unstopped) if unstopped else "–") + ".", "",
            "Not yet in this matrix: Ditto and FedSub (their results against the naive attacks: "
            "[docs/results.md](docs/results.md)), and real peers with a Sybil. Design: "
            "[studies/adversaries-adaptive.md](studies/adversaries-adaptive.md); results and the commands: "
            "[bench/results/adversaries-adaptive/](bench/results/adversaries-adaptive/README.md).", "", END]
    return "\n".join(out)


def readme_with(text: str, table: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + table + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the README differs")
    args = parser.parse_args(argv)
    text = README.read_text()
    new = readme_with(text, section(read_holds(TESTS)))
    if args.check:
        if new != text:
            print("README.md's threat table is stale: run python bench/threat_table.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
