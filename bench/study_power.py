"""Each study design's number of seeds, from the variance already measured in committed results.

A design (``studies/*.yaml``) names, for each of its hypotheses, a variance source: a committed
results file, a column, and the pairs of configurations whose seed-paired differences measure
the spread. This script computes the standard deviation of those differences (the largest over
the named pairs, to stay conservative), then the seeds each hypothesis needs:

- superiority (``kind: superiority``, also rounds to a target): the two-sided paired t test of
  a difference ``delta``, its power from the noncentral t (``scipy.stats.nct``; the formula of
  statsmodels' ``TTestPower``);
- equivalence (``kind: equivalence``): two one-sided tests (TOST) with margin ``margin`` when the
  true difference is 0, power ``2 P(T > t_crit) - 1`` with ``T`` noncentral t, the usual
  approximation.

Each test is planned at ``q / m``, the Benjamini–Hochberg level ``q`` divided by the family's
``m`` powered-or-not comparisons: what Bonferroni rejects, Benjamini–Hochberg rejects too, so
the power holds under the correction actually used. The design's ``n`` is the largest
hypothesis's, and never under ``min_seeds``; a pilot design (``power.pilot: {n, why}``) runs its
declared n, and the table adds the power each test has with it. A design may state its family's
size (``family.size``) where one hypothesis stands for many tests (a matrix of cells). Prints one
table per design; ``--check`` exits 1 when a design file's declared ``n`` differs from the computed one.

    python bench/study_power.py studies/*.yaml
    python bench/study_power.py --check studies/*.yaml
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
MAX_SEEDS = 1000


@dataclass(frozen=True)
class Need:
    """One hypothesis's planning numbers."""

    hypothesis: str
    kind: str
    variance: str
    sd: float
    effect: float
    alpha: float
    n: int


def load(path: Path) -> dict[str, Any]:
    with open(path) as f:
        design = yaml.safe_load(f)
    if not isinstance(design, dict):
        raise ValueError(f"{path}: a design is a mapping")
    return design


def _select(table: pd.DataFrame, where: dict[str, Any]) -> pd.DataFrame:
    """The rows whose columns equal ``where``'s values (numbers compared as numbers)."""
    mask = np.ones(len(table), dtype=bool)
    for column, value in where.items():
        if column not in table.columns:
            raise ValueError(f"column {column!r} is not in the variance file")
        col = table[column]
        mask &= (np.isclose(col.astype(float), float(value)) if isinstance(value, (int, float))
                 and not isinstance(value, bool) else (col.astype(str) == str(value)).to_numpy())
    return table[mask]


def rounds_to_target(rounds: pd.DataFrame, sweep: pd.DataFrame, target: float) -> pd.DataFrame:
    """``sweep`` with a ``rounds_to_target`` column: each cell's first evaluated round whose mean F1
    reaches ``target``; a cell that never does counts as its last round plus one evaluation step."""
    out = []
    for cell, curve in rounds.sort_values("round").groupby("cell"):
        reached = curve[curve["f1_macro_mean"] >= target]["round"]
        steps = curve["round"].diff().dropna()
        never = curve["round"].max() + (steps.iloc[-1] if len(steps) else 1)
        out.append((cell, float(reached.iloc[0]) if len(reached) else float(never)))
    found = pd.DataFrame(out, columns=["cell", "rounds_to_target"])
    return sweep.merge(found, on="cell")


def source_table(source: dict[str, Any]) -> pd.DataFrame:
    """The committed table a variance source reads, with rounds to its target when it asks."""
    table = pd.read_csv(ROOT / source["file"])
    if source["column"] == "rounds_to_target":
        rounds = pd.read_csv(ROOT / source["rounds_file"])
        table = rounds_to_target(rounds, table, float(source["target"]))
    return table


def paired_sd(source: dict[str, Any]) -> float:
    """The largest standard deviation, over the source's pairs, of the seed-paired differences,
    times the source's ``scale`` (1 unless it says; sqrt(2) for a difference of two differences).
    With ``sd_bound: c`` each pair's SD is replaced by its one-sided upper confidence bound at
    level c (chi-square), for a spread measured on few seeds."""
    table = _select(source_table(source), source.get("where", {}))
    column = source["column"]
    sds = []
    for pair in source["pairs"]:
        a = _select(table, pair["a"]).set_index("seed")[column]
        b = _select(table, pair["b"]).set_index("seed")[column]
        if a.index.has_duplicates or b.index.has_duplicates:
            raise ValueError(f"{source['file']}: {pair} selects more than one row per seed")
        diff = (a - b).dropna()
        if len(diff) < 3:
            raise ValueError(f"{source['file']}: {pair} pairs {len(diff)} seeds; at least 3 needed")
        sd = float(diff.std(ddof=1))
        if "sd_bound" in source:
            df = len(diff) - 1
            sd *= math.sqrt(df / stats.chi2.ppf(1 - float(source["sd_bound"]), df))
        sds.append(sd)
    return max(sds) * float(source.get("scale", 1.0))


def power_superiority(n: int, d: float, alpha: float) -> float:
    """Power of the two-sided paired t test of standardised difference ``d`` with ``n`` pairs."""
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    ncp = d * math.sqrt(n)
    return float(stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp))


def power_tost(n: int, m: float, alpha: float) -> float:
    """Power of TOST with standardised margin ``m`` and ``n`` pairs when the true difference is 0."""
    df = n - 1
    crit = stats.t.ppf(1 - alpha, df)
    return max(0.0, float(2 * stats.nct.sf(crit, df, m * math.sqrt(n)) - 1))


def seeds_needed(kind: str, standardised: float, alpha: float, power: float) -> int:
    """The fewest pairs (at least 3) whose power reaches ``power``."""
    test = power_tost if kind == "equivalence" else power_superiority
    for n in range(3, MAX_SEEDS + 1):
        if test(n, standardised, alpha) >= power:
            return n
    raise ValueError(f"{kind}: more than {MAX_SEEDS} seeds needed")


def needs(design: dict[str, Any]) -> list[Need]:
    """Every powered hypothesis's planning numbers, in the design's order."""
    plan = design["power"]
    family = [h for h in design["hypotheses"] if h.get("in_family", True)]
    alpha = float(plan["q"]) / int(design.get("family", {}).get("size", len(family)))
    sds = {name: paired_sd(source) for name, source in plan["variance"].items()}
    out = []
    for h in design["hypotheses"]:
        if "variance" not in h:
            continue
        effect = float(h["margin"] if h["kind"] == "equivalence" else h["delta"])
        sd = sds[h["variance"]]
        n = seeds_needed(h["kind"], effect / sd, alpha, float(plan["power"]))
        out.append(Need(h["id"], h["kind"], h["variance"], sd, effect, alpha, n))
    return out


def design_n(design: dict[str, Any]) -> int:
    """The seeds the design runs: its largest hypothesis's, never under ``min_seeds``; a pilot's
    declared n (``power.pilot``), which says why it runs fewer."""
    if "pilot" in design["power"]:
        return int(design["power"]["pilot"]["n"])
    return max([int(design["power"]["min_seeds"]), *(need.n for need in needs(design))])


def power_at(need: Need, n: int) -> float:
    """The power ``need``'s test has with ``n`` seeds."""
    test = power_tost if need.kind == "equivalence" else power_superiority
    return test(n, need.effect / need.sd, need.alpha)


def report(path: Path, design: dict[str, Any]) -> str:
    n = design_n(design)
    pilot = "pilot" in design["power"]
    lines = [f"{path}: n = {n}{' (a pilot)' if pilot else ''} (declared {design['power'].get('n')})",
             "  hypothesis             kind         variance        sd        effect    alpha      n"
             + (f"   power at n = {n}" if pilot else "")]
    for need in needs(design):
        lines.append(f"  {need.hypothesis:<22} {need.kind:<12} {need.variance:<15} {need.sd:<9.4f} "
                     f"{need.effect:<9.4g} {need.alpha:<10.2e} {need.n}"
                     + (f"    {power_at(need, n):.2f}" if pilot else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("designs", type=Path, nargs="+", help="study design files")
    parser.add_argument("--check", action="store_true", help="exit 1 when a declared n differs")
    args = parser.parse_args(argv)
    wrong = []
    for path in args.designs:
        design = load(path)
        print(report(path, design))
        if design_n(design) != design["power"].get("n"):
            wrong.append(str(path))
    if args.check and wrong:
        print(f"declared n differs from the computed one: {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
