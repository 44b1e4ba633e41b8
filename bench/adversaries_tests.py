"""Which defence holds against which attack, from the adversaries sweep's cells, seed by seed.

Reads every cell's ``summary.json``: its defence (``algorithm.robust``), its attack (the
``adversaries`` entry: kind and fraction), its seed, and the honest devices' final F1
(``adversaries.honest_f1_mean``; the whole run's F1 for a run without liars). The unit of every
test is the seed (one whole run). Two families of tests, each adjusted over its own number of
comparisons (Benjamini–Hochberg, stated in the table):

- **holds**: a defence holds against an attack at a fraction when the honest devices' F1 under
  that attack with that defence is not more than ``MARGIN`` (0.05) below the F1 of the run with
  neither liars nor defence, same seed: one-sided paired t-test of ``defended - clean > -MARGIN``
  (non-inferiority), adjusted p < 0.05; with ``--holds tost``, within ``MARGIN`` of it either way:
  two one-sided paired t-tests (TOST), the larger p-value adjusted, and a cell whose mean
  difference is above ``+MARGIN`` marked ▲ (described, not tested: it is not equivalent);
- **helps**: the defence against no defence under the same attack: two-sided paired t-test of
  the honest F1, adjusted p < 0.05.

    python bench/adversaries_tests.py bench/results/adversaries
    python bench/adversaries_tests.py bench/results/adversaries-adaptive --holds tost \
        --design studies/adversaries-adaptive.yaml

writes ``tests.csv``, ``table.md`` (a table per method; each method's tests adjusted apart) and
``honest_f1.png`` (honest F1 against the liars' fraction, a panel per method and attack, a line
per defence, mean and 95 % t interval over seeds) into the sweep folder and prints the tables;
with ``--design``, also the folder's ``README.md``: the study's question, the commit the runs
came from, where they depart from the design, the commands and the tables.
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from p2pfed.sweeps.archive import stored_cells
from p2pfed.sweeps.paired import adjust, paired_test

ROOT = Path(__file__).resolve().parents[1]
MARGIN = 0.05
ALPHA = 0.05
SPREAD_FLOOR = 1e-9   # differences spread less than this are equal (float rounding), not a t-test's input


def attack_label(adversaries: list[dict[str, Any]]) -> str:
    if not adversaries:
        return "none"
    (entry,) = adversaries
    kind = entry["kind"] if isinstance(entry["kind"], str) else "+".join(entry["kind"])
    return f"{kind} {round(100 * entry['fraction'])} %"


def read_cells(folder: Path) -> dict[str, dict[tuple[str, str], dict[int, float]]]:
    """method -> (defence, attack) -> seed -> honest F1."""
    out: dict[str, dict[tuple[str, str], dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for cell in stored_cells(folder).values():
        s = cell.summary
        config = s["config"]
        f1 = s["adversaries"]["honest_f1_mean"] if "adversaries" in s else s["final"]["f1_macro_mean"]
        key = (config["algorithm"].get("robust", "none"), attack_label(config.get("adversaries", [])))
        out[config["algorithm"]["name"]][key][int(config["seed"])] = float(f1)
    return out


def non_inferiority(defended: list[float], clean: list[float]) -> float:
    """One-sided p of ``mean(defended - clean) > -MARGIN`` (1.0 where the differences have no spread
    and sit at or below the margin, 0.0 where they have none and sit above it)."""
    diff = np.asarray(defended) - np.asarray(clean) + MARGIN
    if diff.size < 2 or float(diff.std(ddof=1)) == 0.0:
        return 0.0 if float(diff.mean()) > 0 else 1.0
    return float(stats.ttest_1samp(diff, 0.0, alternative="greater").pvalue)


def equivalence(defended: list[float], clean: list[float]) -> float:
    """TOST's p of ``|mean(defended - clean)| < MARGIN``: the larger of the two one-sided p-values
    (with no spread in the differences, float rounding aside: 0.0 inside the margin, 1.0 on or outside it)."""
    diff = np.asarray(defended) - np.asarray(clean)
    if diff.size < 2 or float(diff.std(ddof=1)) < SPREAD_FLOOR:
        return 0.0 if abs(float(diff.mean())) < MARGIN else 1.0
    lower = stats.ttest_1samp(diff, -MARGIN, alternative="greater").pvalue
    upper = stats.ttest_1samp(diff, MARGIN, alternative="less").pvalue
    return float(max(lower, upper))


HOLDS = {"non-inferiority": (non_inferiority, f"holds: defended - clean > -{MARGIN} (one-sided)"),
         "tost": (equivalence, f"holds: |defended - clean| < {MARGIN} (TOST)")}


def tests(cells: dict[tuple[str, str], dict[int, float]], method: str,
          holds_test: str = "non-inferiority") -> list[dict[str, Any]]:
    """One method's holds and helps tests (each family adjusted over its comparisons)."""
    holds_p, holds_label = HOLDS[holds_test]
    clean = cells[("none", "none")]
    defences = sorted({d for d, _ in cells}, key=lambda d: (d != "none", d))
    attacks = sorted({a for _, a in cells},
                     key=lambda a: (a != "none", a.split()[0], float(a.split()[-2]) if a != "none" else 0.0))
    holds, helps = [], []
    for attack in attacks:
        for defence in defences:
            runs = cells.get((defence, attack), {})
            seeds = sorted(set(runs) & set(clean))
            if (defence, attack) == ("none", "none") or len(seeds) < 2:
                continue
            row = {"method": method, "attack": attack, "defence": defence, "seeds": len(seeds),
                   **paired_test([runs[s] for s in seeds], [clean[s] for s in seeds])}
            row["p_value"] = holds_p([runs[s] for s in seeds], [clean[s] for s in seeds])
            holds.append(row)
            if defence != "none" and attack != "none":
                plain = cells.get(("none", attack), {})
                both = sorted(set(runs) & set(plain))
                helps.append({"method": method, "attack": attack, "defence": defence, "seeds": len(both),
                              **paired_test([runs[s] for s in both], [plain[s] for s in both])})
    for row in adjust(holds):
        row["test"] = holds_label
    for row in adjust(helps):
        row["test"] = "helps: defended vs undefended (two-sided)"
    return holds + helps


def table(rows: list[dict[str, Any]]) -> str:
    """One method's markdown table: a line per attack, a column per defence."""
    holds = [r for r in rows if r["test"].startswith("holds")]
    helps = {(r["attack"], r["defence"]): r for r in rows if r["test"].startswith("helps")}
    defences = sorted(dict.fromkeys(r["defence"] for r in holds), key=lambda d: (d != "none", d))
    lines = [f"### {rows[0]['method']}", "", "| attack | " + " | ".join(defences) + " |",
             "|---|" + "---|" * len(defences)]
    by = {(r["attack"], r["defence"]): r for r in holds}
    for attack in dict.fromkeys(r["attack"] for r in holds):
        cells = []
        for d in defences:
            r = by.get((attack, d))
            if r is None:
                cells.append("–")
                continue
            mark = " ✓" if r["p_adjusted"] != "" and float(r["p_adjusted"]) < ALPHA else ""
            h = helps.get((attack, d))
            helped = h is not None and h["p_adjusted"] != "" and float(h["p_adjusted"]) < ALPHA
            better = " ↑" if helped and h is not None and float(h["f1_diff"]) > 0 else ""
            above = " ▲" if "TOST" in r["test"] and float(r["f1_diff"]) > MARGIN else ""
            cells.append(f"{r['f1_a']:.3f} ({float(r['f1_diff']):+.3f}){mark}{above}{better}".replace("-", "−"))
        lines.append(f"| {attack} | " + " | ".join(cells) + " |")
    n_holds = holds[0]["comparisons"] if holds else 0
    n_helps = next(iter(helps.values()))["comparisons"] if helps else 0
    tost = bool(holds) and "TOST" in holds[0]["test"]
    holds_text = (f"within {MARGIN} of it either way (TOST: two one-sided paired t-tests, the larger p" if tost
                  else f"not more than {MARGIN} below it (one-sided paired t-test")
    above_text = f"▲: mean difference above +{MARGIN}, not equivalent (described, not tested). " if tost else ""
    lines += ["", f"Each cell: the honest devices' final F1, mean over seeds, and (in brackets) its paired difference "
              f"from the run with neither liars nor defence. ✓: holds — {holds_text}, "
              f"Benjamini–Hochberg over {n_holds} comparisons, adjusted p < {ALPHA}). {above_text}"
              f"↑: better than no defence under the same attack (two-sided paired t-test, "
              f"Benjamini–Hochberg over {n_helps} comparisons, adjusted p < {ALPHA})."]
    return "\n".join(lines) + "\n"


def plot(cells: dict[str, dict[tuple[str, str], dict[int, float]]], path: Path) -> None:
    """Honest F1 against the fraction of liars: a row of panels per method, a column per attack
    kind, a line per defence."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    methods = sorted(cells)
    kinds = sorted({a.rsplit(" ", 2)[0] for by in cells.values() for _, a in by if a != "none"})
    fig, axes = plt.subplots(len(methods), len(kinds), figsize=(3.2 * len(kinds), 3.0 * len(methods)),
                             sharey=True, squeeze=False)
    for row, method in zip(axes, methods):
        by = cells[method]
        for ax, kind in zip(row, kinds):
            attacks = sorted({a for d, a in by if a.startswith(kind + " ")}, key=lambda a: float(a.split()[-2]))
            if not attacks:
                ax.axis("off")
                continue
            for defence in sorted({d for d, _ in by}, key=lambda d: (d != "none", d)):
                xs, means, halves = [], [], []
                for attack in ["none", *attacks]:
                    values = list(by.get((defence, attack), {}).values())
                    if len(values) < 2:
                        continue
                    xs.append(0.0 if attack == "none" else float(attack.split()[-2]))
                    means.append(float(np.mean(values)))
                    spread = np.std(values, ddof=1) / math.sqrt(len(values))
                    halves.append(float(stats.t.ppf(0.975, len(values) - 1) * spread))
                ax.errorbar(xs, means, yerr=halves, marker="o", capsize=3, label=defence)
            ax.set_title(f"{method}: {kind}", fontsize=9)
            ax.set_xlabel("liars (%)")
        row[0].set_ylabel("honest devices' F1")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def provenance(folder: Path) -> tuple[list[str], int, float]:
    """The commits the cells were made at (``+dirty`` where the package tree was not clean), the
    number of cells, and their summed wall time in seconds."""
    commits: set[str] = set()
    count, wall = 0, 0.0
    for cell in stored_cells(folder).values():
        code = cell.summary.get("code", {})
        commits.add(str(code.get("git_commit", "unknown"))[:7] + ("+dirty" if code.get("git_dirty") else ""))
        count += 1
        wall += float(cell.summary.get("wall_time_s", 0.0))
    return sorted(commits), count, wall


def readme(folder: Path, design_path: Path, tables: str) -> str:
    """The results folder's page: what the design declared, where these runs depart from it, the
    commands, and the tables."""
    import yaml

    design = yaml.safe_load(design_path.read_text())
    declared = design_path.resolve().relative_to(ROOT).as_posix()
    page = declared.removesuffix(".yaml") + ".md"
    commits, count, wall = provenance(folder)
    n = int(design["power"]["n"])
    configurations = len(design["defences"]) * (len(design["attacks"]) * len(design["fractions"]) + 1)
    expected = len(design["methods"]) * configurations * n
    departures = ([f"the cells come from {len(commits)} commits ({', '.join(commits)})"] if len(commits) != 1 else []) \
        + ([f"the package tree was not clean ({commits[0]})"] if len(commits) == 1 and "dirty" in commits[0] else []) \
        + ([f"{count} runs where the design declares {expected}"] if count != expected else [])
    return "\n".join([
        f"# {design['study']}: which defence holds", "",
        design["question"], "",
        f"Declared before its runs: [`{declared}`](../../../{declared}) (its page: [`{page}`](../../../{page})). "
        f"{count} runs ({', '.join(design['methods'])}; seeds 1 to {n}) from commit "
        f"{', '.join(commits)}; {wall / 60:.0f} minutes of summed run time. Departures from the design: "
        + ("; ".join(departures) if departures else "none (one clean commit, every declared run present)") + ".", "",
        "Reproduce:", "",
        f"    p2pfed sweep {design['sweep']} --out {design['results']} --workers 2",
        f"    p2pfed report {design['results']} --pack",
        f"    {design['analysis']} --design {declared}",
        "    python bench/threat_table.py        # the main README's threat table", "",
        "The sweep's own `summary.csv`/`paired.csv` score all devices, liars too; the tables below read the "
        "honest devices' final F1 (`summary.json` `adversaries.honest_f1_mean`), the seed the unit. "
        "`tests.csv` holds every test, `honest_f1.png` the curves (mean and 95 % t interval over seeds). "
        "`p2pfed report` also writes `paired.csv` (every pair of configurations, attacks and methods mixed), "
        "`report.html` and `f1_curves.png`; they are not kept here (tens of MB) and come back with it.", "",
        tables]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="the adversaries sweep's results folder")
    parser.add_argument("--holds", choices=sorted(HOLDS), default="non-inferiority",
                        help="the holds test: one-sided non-inferiority, or TOST (equivalence) at the margin")
    parser.add_argument("--design", type=Path, help="the study design the sweep ran: also write the folder's README.md")
    args = parser.parse_args(argv)
    cells = read_cells(args.sweep)
    per_method = {m: tests(by, m, args.holds) for m, by in sorted(cells.items())}
    plot(cells, args.sweep / "honest_f1.png")
    rows = [r for method_rows in per_method.values() for r in method_rows]
    with open(args.sweep / "tests.csv", "w", newline="") as f:
        fields = ["test", "method", "attack", "defence", "seeds", "f1_a", "f1_b", "f1_diff", "f1_diff_ci_low",
                  "f1_diff_ci_high", "p_value", "p_adjusted", "adjustment", "comparisons"]
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    text = "\n".join(table(method_rows) for method_rows in per_method.values())
    (args.sweep / "table.md").write_text(text)
    if args.design is not None:
        (args.sweep / "README.md").write_text(readme(args.sweep, args.design, text))
    print(text)
    return 0 if not any(math.isnan(float(r["f1_a"])) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
