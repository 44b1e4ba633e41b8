"""docs/results.md, generated: the papers' claims and each result set, every figure read or computed
from the committed results (each sweep's ``paired.csv``, ``summary.csv`` and cells, and the test
files of the benchmark scripts), never typed by hand. ``bench/results_page.yaml`` says what to
show: which claims, which comparisons and the words around them.

Reading rules the page states and applies: the unit of every test is the seed (a whole run); each
table names its family, the comparisons whose p-values Benjamini–Hochberg adjusted together; a
difference is stated ("above", "below") where the adjusted p is below ALPHA; "level" only where an
equivalence test says so (two one-sided t-tests with margin ±``margin`` F1, derived from the
row's mean difference and its 95 % t interval, the p-values adjusted by Benjamini–Hochberg over
the same family); anything else is "not shown different".

    python bench/results_page.py           # writes docs/results.md
    python bench/results_page.py --check   # exit 1 if docs/results.md is not what it would write
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SPEC = ROOT / "bench" / "results_page.yaml"
PAGE = ROOT / "docs" / "results.md"
COMMAND = "python bench/results_page.py"
ALPHA = 0.05
MINUS = "\u2212"


# ---------------------------------------------------------------- reading the committed files

def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def number(text: str | None) -> float | None:
    return None if text in (None, "", "nan") else float(text)  # type: ignore[arg-type]


@cache
def archived_summaries(folder: str) -> list[dict[str, Any]]:
    """The summary.json of every cell of a sweep folder's archive."""
    path = RESULTS / folder / "cells.jsonl"
    return [json.loads(line)["summary"] for line in path.read_text().splitlines() if line]


def dig(data: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


def headline_protocol(folder: str) -> str:
    """The protocol of a sweep's headline F1, for a paired.csv written before it was a column."""
    summary = archived_summaries(folder)[0]
    if "evaluation" in summary:
        return str(summary["evaluation"]["protocol"])
    if dig(summary, "config.contacts.kind") not in (None, "none"):
        return "at-instant"
    return str(dig(summary, "config.evaluation.when") or "after-fusion")


# ---------------------------------------------------------------- comparisons and verdicts

@dataclass(frozen=True)
class Row:
    """One comparison a − b of a family, with both tests' adjusted p-values."""

    a: str
    b: str
    n: int
    mean_a: float
    mean_b: float
    diff: float
    low: float | None
    high: float | None
    p: float | None
    p_adj: float | None
    equivalent_adj: float | None = None      # None: no equivalence test (no interval, or no margin)

    def flipped(self) -> Row:
        return replace(self, a=self.b, b=self.a, mean_a=self.mean_b, mean_b=self.mean_a, diff=-self.diff,
                       low=None if self.high is None else -self.high, high=None if self.low is None else -self.low)

    @property
    def decided(self) -> bool:
        return self.p_adj is not None and self.p_adj < ALPHA

    @property
    def level(self) -> bool:
        return self.equivalent_adj is not None and self.equivalent_adj < ALPHA

    @property
    def verdict(self) -> str:
        """How a stands to b: above, below, level, not shown different (or: no spread to test)."""
        if self.decided:
            return ("above" if self.diff > 0 else "below") + (" (by less than the margin)" if self.level else "")
        if self.level:
            return "level"
        if self.p is None:
            return "the same difference in every seed (no test)" if self.diff else "identical in every seed"
        return "not shown different"


@dataclass
class Family:
    """Comparisons whose p-values were adjusted together, and where they come from."""

    source: str                  # e.g. ``wisdm-static-seeds-10/paired.csv``
    protocol: str                # which model the F1 scored ("" where not an F1)
    size: int                    # comparisons adjusted together
    rows: list[Row]

    def find(self, a: str, b: str) -> Row:
        for row in self.rows:
            if (row.a, row.b) == (a, b):
                return row
            if (row.a, row.b) == (b, a):
                return row.flipped()
        raise SystemExit(f"{self.source} ({self.protocol}): no comparison of {a!r} with {b!r}")

    @property
    def described(self) -> str:
        protocol = f", F1 {shown_protocol(self.protocol)}" if self.protocol else ""
        many = "comparison" if self.size == 1 else f"{self.size} comparisons"
        return f"Benjamini–Hochberg over the {many} of `{self.source}`{protocol}"


def shown_protocol(protocol: str) -> str:
    return {"at-instant": "at its evaluation instant"}.get(protocol, protocol.replace("-", " "))


def equivalence_p(row: Row, margin: float) -> float | None:
    """TOST p-value that |a − b| < margin, from the mean difference and its 95 % t interval."""
    if row.low is None or row.high is None or row.n < 2:
        return None
    se = (row.high - row.low) / (2 * stats.t.ppf(0.975, row.n - 1))
    if se <= 0:
        return None
    lower = stats.t.sf((row.diff + margin) / se, row.n - 1)     # H0: diff <= -margin
    upper = stats.t.cdf((row.diff - margin) / se, row.n - 1)    # H0: diff >= +margin
    return float(max(lower, upper))


def with_equivalence(rows: list[Row], margin: float | None) -> list[Row]:
    """``rows`` with the equivalence tests' p-values adjusted over the family (Benjamini–Hochberg)."""
    if margin is None:
        return rows
    ps = [equivalence_p(r, margin) for r in rows]
    tested = [i for i, p in enumerate(ps) if p is not None]
    adjusted = stats.false_discovery_control([ps[i] for i in tested], method="bh") if tested else []
    out = list(rows)
    for i, p in zip(tested, adjusted):
        out[i] = replace(rows[i], equivalent_adj=float(p))
    return out


def _row(a: str, b: str, r: dict[str, str], metric: str) -> Row:
    return Row(a, b, int(r.get("n") or r["seeds"]), float(r[f"{metric}_a"]), float(r[f"{metric}_b"]),
               float(r[f"{metric}_diff"]), number(r[f"{metric}_diff_ci_low"]), number(r[f"{metric}_diff_ci_high"]),
               number(r["p_value"]), number(r["p_adjusted"]))


def _size(rows: list[dict[str, str]]) -> int:
    sizes = {int(r["comparisons"]) for r in rows}
    if len(sizes) != 1:
        raise SystemExit(f"one family with several sizes of adjustment: {sorted(sizes)}")
    return sizes.pop()


@cache
def paired_family(folder: str, protocol: str, margin: float) -> Family:
    """The rows of ``folder/paired.csv`` under one protocol (``headline``: its first rows)."""
    rows = read_rows(RESULTS / folder / "paired.csv")
    if "protocol" not in rows[0]:
        named = headline_protocol(folder)
        if protocol not in ("headline", named):
            raise SystemExit(f"{folder}/paired.csv: has only its headline protocol ({named}), not {protocol}")
        protocol, chosen = named, rows
    else:
        protocol = rows[0]["protocol"] if protocol == "headline" else protocol
        chosen = [r for r in rows if r["protocol"] == protocol]
    if not chosen:
        raise SystemExit(f"{folder}/paired.csv: no rows under protocol {protocol}")
    found = with_equivalence([_row(r["a"], r["b"], r, "f1") for r in chosen], margin)
    return Family(f"{folder}/paired.csv", protocol, _size(chosen), found)


@cache
def tests_family(folder: str, margin: float | None, select: str = "", method: str = "") -> Family:
    """A benchmark script's ``tests.csv``: the CNN/MLP file (``comparison`` "m: x − y"), the energy
    file (``radio``, ``a``, ``b``, F1 per joule: no margin) or one test of one method in the
    adversaries file (rows named ``method|attack|defence``)."""
    rows = read_rows(RESULTS / folder / "tests.csv")
    if "comparison" in rows[0]:
        parsed = []
        for r in rows:   # "fedsub: cnn − mlp" or "cnn: fedsub − local", as "method model" pairs
            head, _, pair = r["comparison"].partition(": ")
            x, _, y = pair.partition(" − ")
            a, b = (f"{x}|{head}", f"{y}|{head}") if head in ("cnn", "mlp") else (f"{head}|{x}", f"{head}|{y}")
            parsed.append(_row(a, b, r, "f1"))
        return Family(f"{folder}/tests.csv", "", _size(rows), with_equivalence(parsed, margin))
    if "radio" in rows[0]:
        parsed = [_row(f"{r['a']}|{r['radio']}", f"{r['b']}|{r['radio']}", r, "f1_per_j") for r in rows]
        return Family(f"{folder}/tests.csv", "", _size(rows), parsed)
    chosen = [r for r in rows if r["test"].startswith(select) and r["method"] == method]
    parsed = [_row(f"{r['method']}|{r['attack']}|{r['defence']}", "", r, "f1") for r in chosen]
    return Family(f"{folder}/tests.csv", "", _size(chosen), parsed)


# ---------------------------------------------------------------- means and facts

@cache
def summary_rows(folder: str) -> list[dict[str, str]]:
    return read_rows(RESULTS / folder / "summary.csv")


def summary_row(folder: str, config: str) -> dict[str, str]:
    """The summary.csv row of a configuration named as paired.csv names it."""
    method, *values = config.split(" ")
    for row in summary_rows(folder):
        if row["method"] == method and all(row.get(k) == v for k, _, v in (x.partition("=") for x in values)):
            return row
    raise SystemExit(f"{folder}/summary.csv: no row for {config!r}")


def mean_text(folder: str, config: str, metric: str = "f1", digits: int = 3) -> str:
    row = summary_row(folder, config)
    mean, low, high = (number(row[f"{metric}_{s}"]) for s in ("mean", "ci_low", "ci_high"))
    if mean is None:
        raise SystemExit(f"{folder}/summary.csv: {config}: no {metric}_mean")
    if low is None or high is None:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def fact(spec: dict[str, Any]) -> str:
    """One number of a text, computed as ``spec`` says (see bench/results_page.yaml)."""
    fmt = spec.get("fmt", "{:.3f}")
    if "mean" in spec:
        return mean_text(spec["mean"], spec["config"], spec.get("metric", "f1"), spec.get("digits", 3))
    if "json" in spec:
        return fmt.format(dig(json.loads((RESULTS / spec["json"]).read_text()), spec["path"]))
    if "cells" in spec:
        values = [dig(s, spec["path"]) / (dig(s, spec["divide_by"]) if "divide_by" in spec else 1)
                  for s in archived_summaries(spec["cells"])
                  if all(dig(s, k) == v for k, v in spec.get("where", {}).items())]
    elif "csv" in spec:
        values = [float(r[spec["column"]]) for r in read_rows(RESULTS / spec["csv"])
                  if all(r[k] == str(v) for k, v in spec.get("where", {}).items())]
    else:
        raise SystemExit(f"{SPEC}: a fact needs mean, cells or csv: {spec}")
    if not values:
        raise SystemExit(f"{SPEC}: no value for the fact {spec}")
    if spec.get("agg", "mean") == "range":
        low, high = fmt.format(min(values)), fmt.format(max(values))
        return low if low == high else f"{low}–{high}"
    return fmt.format(float(np.mean(values)))


def fact_value(spec: dict[str, Any]) -> float:
    text = fact({**spec, "fmt": "{!r}", "agg": "mean"})
    return float(text)


# ---------------------------------------------------------------- formatting

def signed(x: float, digits: int = 3, significant: bool = False) -> str:
    text = f"{x:+.{digits}g}" if significant else f"{x:+.{digits}f}"
    return text.replace("-", MINUS)


def p_text(p: float | None) -> str:
    if p is None:
        return "–"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}".replace("-", MINUS)


def interval(row: Row, digits: int = 3, significant: bool = False) -> str:
    parts = [signed(x, digits, significant) for x in (row.diff, row.low, row.high) if x is not None]
    return parts[0] if len(parts) < 3 else f"{parts[0]} [{parts[1]}, {parts[2]}]"


class Names:
    """How configurations are shown: a full label's own name, else the method's name and the
    swept values without their ``algorithm.`` prefix."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def __call__(self, label: str) -> str:
        label, _, where = label.partition("|")     # a benchmark's test: "configuration|model or radio"
        suffix = f", {where}" if where else ""
        if label in self.names:
            return self.names[label] + suffix
        method, *values = label.split(" ")
        shown = [v.removeprefix("algorithm.").removeprefix("dataset.") for v in values]
        return " ".join([self.names.get(method, method), *(f"`{v}`" for v in shown)]) + suffix


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


# ---------------------------------------------------------------- claims

RELATIONS = ("above", "below", "level")


def relation_holds(row: Row, relation: str) -> str:
    """holds / contradicted / open: what the row says of ``a <relation> b``."""
    if relation == "level":
        return "holds" if row.level else "contradicted" if row.decided else "open"   # level beats decided
    if row.decided:
        return "holds" if (row.diff > 0) == (relation == "above") else "contradicted"
    return "open"


def part_verdict(outcomes: list[str]) -> str:
    if "contradicted" in outcomes:
        return "no"
    return "yes" if all(o == "holds" for o in outcomes) else "not shown"


def claim_verdict(parts: dict[str, list[str]]) -> str:
    verdicts = {name: part_verdict(o) for name, o in parts.items()}
    if len(set(verdicts.values())) == 1:
        return f"**{next(iter(verdicts.values()))}**"
    return "**partly**: " + "; ".join(f"{name}: {v}" for name, v in verdicts.items())


class Page:
    """The page's parts, from the spec."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.margin = float(spec["margin"])
        self.name = Names(spec.get("names", {}))

    def text(self, template: str, facts: dict[str, Any]) -> str:
        return " ".join(template.split()).format(**{k: fact(v) for k, v in facts.items()})

    def family(self, evidence: dict[str, Any]) -> Family:
        return paired_family(evidence["folder"], evidence.get("protocol", "headline"), self.margin)

    def claim_row(self, claim: dict[str, Any]) -> list[str]:
        facts = claim.get("facts", {})
        parts: dict[str, list[str]] = {}
        result = [self.text(claim["result"], facts)] if "result" in claim else []
        for evidence in claim.get("evidence", []):
            result.append(self.evidence_text(evidence, parts))
        for a, relation, b, *part in claim.get("counted", []):
            va, vb = (fact_value(facts[x]) if isinstance(x, str) else float(x) for x in (a, b))
            held = (va > vb) if relation == "above" else (va < vb)
            parts.setdefault(part[0] if part else "the claim", []).append("holds" if held else "contradicted")
        return [self.text(claim["claim"], facts), self.text(claim["setting"], facts), " ".join(result),
                claim_verdict(parts), self.text(claim.get("cause", "–"), facts)]

    def evidence_text(self, evidence: dict[str, Any], parts: dict[str, list[str]]) -> str:
        family = self.family(evidence)
        folder = evidence["folder"]
        lead = evidence.get("subject")
        bits = []
        if lead:
            protocol = evidence.get("protocol", "headline")
            metric = "f1" if protocol == "headline" else f"f1_{protocol.replace('-', '_')}"
            bits.append(f"{self.name(lead)} {mean_text(folder, lead, metric)}")
        for item in evidence.get("compare", []):
            a, relation, b, *part = item
            row = family.find(a, b)
            if relation in RELATIONS:
                parts.setdefault(part[0] if part else "the claim", []).append(relation_holds(row, relation))
            verb, _, note = row.verdict.partition(" (")
            verb = {"level": "level with", "not shown different": "not shown different from"}.get(verb, verb)
            note = f", {note.rstrip(')')}" if note else ""
            bits.append(f"{self.name(a)} {verb} {self.name(b)} ({interval(row)}, adj. p {p_text(row.p_adj)}, "
                        f"n {row.n}{note})")
        where = f"`{folder}/`, F1 {shown_protocol(family.protocol)}, {family.size} comparisons adjusted"
        return f"*{where}:* " + "; ".join(bits) + "."

    def claims(self) -> list[str]:
        header = ["claim (paper, where)", "our setting", "our result", "reproduced?",
                  "cause (measured, or a hypothesis where marked)"]
        return table(header, [self.claim_row(c) for c in self.spec["claims"]])

    # ------------------------------------------------------------ result sets

    def means_table(self, folder: str, configs: list[str], extra: list[str], headline: str) -> list[str]:
        columns = {"f1": f"F1 {shown_protocol(headline)} (headline)", "f1_after_training": "F1 after training",
                   "bytes_per_device_per_round": "bytes/device/round", "generalization_f1": "F1 on others' data"}
        header = ["configuration", "seeds", *(columns[m] for m in ["f1", *extra])]
        rows = []
        for config in configs:
            row = summary_row(folder, config)
            cells = [self.name(config), row["n"]]
            for metric in ["f1", *extra]:
                if number(row.get(f"{metric}_mean")) is None:
                    cells.append("–")
                elif metric == "bytes_per_device_per_round":
                    cells.append(f"{float(row[f'{metric}_mean']):,.0f}")
                else:
                    cells.append(mean_text(folder, config, metric))
            rows.append(cells)
        return table(header, rows)

    def pairs_table(self, family: Family, pairs: list[list[str]] | None, metric: str = "F1",
                    significant: bool = False) -> list[str]:
        chosen = family.rows if pairs is None else [family.find(a, b) for a, b in pairs]
        header = ["A", "B", "n", f"{metric} A", f"{metric} B", "A − B [95 % CI]", "p", "adj. p", "equiv. adj. p",
                  "A is"]
        mean = "{:.3g}" if significant else "{:.3f}"
        rows = [[self.name(r.a), self.name(r.b), str(r.n), mean.format(r.mean_a), mean.format(r.mean_b),
                 interval(r, 3, significant), p_text(r.p), p_text(r.p_adj), p_text(r.equivalent_adj), r.verdict]
                for r in chosen]
        return [f"Family: {family.described}."] + [""] + table(header, rows)

    def paired_tables(self, folder: str, protocol: str, pairs: list[list[str]] | None) -> list[str]:
        family = self.family({"folder": folder, "protocol": protocol})
        lines = self.pairs_table(family, pairs)
        lines[0] = f"Paired by seed, F1 {shown_protocol(family.protocol)}. {lines[0]}"
        return lines

    def result_set(self, entry: dict[str, Any]) -> list[str]:
        facts = entry.get("facts", {})
        lines = [f"### {entry['title']}", "", self.text(entry["about"], facts), ""]
        kind = entry.get("kind", "paired")
        lines += RENDERERS[kind](self, entry)
        return lines

    def page(self) -> str:
        lines = [
            "# Results",
            "",
            f"Generated by `{COMMAND}` from the committed results in `bench/results/` (do not edit by hand;"
            f" `{COMMAND}` writes it again, and a test fails when it differs).",
            "",
            "## How to read it",
            "",
            *self.rules(),
            "",
            "## The papers' claims",
            "",
            "The evidence so far, from the result sets below: each row's comparisons are adjusted within the "
            "family its result set names, and several sets pooled seeds across commits. The claims table that "
            "decides each headline claim is `studies/claims.md` in the repository: every claim quoted, each "
            "decided by a study declared before its runs, run from one commit, and the whole table adjusted as "
            "one family.",
            "",
            *self.claims(),
            "",
            "## The result sets",
            "",
        ]
        for entry in self.spec["sets"]:
            lines += self.result_set(entry) + [""]
        return "\n".join(lines).rstrip("\n") + "\n"

    def rules(self) -> list[str]:
        m = f"{self.margin:.2f}"
        return [" ".join(self.spec["reading"].split()).format(margin=m, alpha=ALPHA)]


def render_paired(page: Page, entry: dict[str, Any]) -> list[str]:
    folder = entry["folder"]
    headline = page.family({"folder": folder})
    configs = entry.get("configs") or list(dict.fromkeys(x for r in headline.rows for x in (r.a, r.b)))
    lines = page.means_table(folder, configs, entry.get("columns", []), headline.protocol) + [""]
    for protocol in entry.get("protocols", ["headline"]):
        lines += page.paired_tables(folder, protocol, entry.get("pairs")) + [""]
    return lines[:-1]


def render_tests(page: Page, entry: dict[str, Any]) -> list[str]:
    margin = page.margin if entry.get("equivalence", True) else None
    family = tests_family(entry["folder"], margin)
    if margin is not None:
        return page.pairs_table(family, entry.get("pairs"))
    lines = page.pairs_table(family, entry.get("pairs"), entry["metric"], significant=True)
    lines[0] = lines[0].rstrip(".") + f"; {entry['metric']}, for which no equivalence margin is set."
    return lines


def render_adversaries(page: Page, entry: dict[str, Any]) -> list[str]:
    """Per method, attack × defence: honest F1 (difference from the clean run), ✓ where the
    non-inferiority test says it holds, ↑ where it is above no defence."""
    folder = entry["folder"]
    methods = list(dict.fromkeys(r["method"] for r in read_rows(RESULTS / folder / "tests.csv")))
    lines = [f"✓ holds: {entry['holds']}, adjusted p < {ALPHA}. ↑ above no defence under the same attack "
             f"(two-sided paired t-test), adjusted p < {ALPHA}.", ""]
    for method in methods:
        holds, helps = tests_family(folder, None, "holds", method), tests_family(folder, None, "helps", method)
        helped = {r.a for r in helps.rows if r.decided and r.diff > 0}
        found = {tuple(r.a.split("|")[1:]): r for r in holds.rows}
        defences = sorted({d for _, d in found}, key=lambda d: (d != "none", d))
        attacks = sorted({a for a, _ in found}, key=lambda a: (a != "none", a))
        rows = []
        for attack in attacks:
            cells = [attack]
            for defence in defences:
                r = found.get((attack, defence))
                mark = "" if r is None else (" ✓" if r.decided else "") + (" ↑" if r.a in helped else "")
                cells.append("–" if r is None else f"{r.mean_a:.3f} ({signed(r.diff)}){mark}")
            rows.append(cells)
        lines += [f"{page.name(method)} (✓: {holds.described}; ↑: {helps.described}):", ""]
        lines += table(["attack", *defences], rows) + [""]
    return lines[:-1]


def render_table(page: Page, entry: dict[str, Any]) -> list[str]:
    """A descriptive table (one seed, or counted bytes): rows of facts, no test."""
    rows = [[page.text(str(cell), entry.get("facts", {})) for cell in row] for row in entry["rows"]]
    return table(entry["header"], rows)


def render_csv(page: Page, entry: dict[str, Any]) -> list[str]:
    """A committed CSV's rows (``where``: only those), chosen columns with their formats; no test."""
    columns = entry["columns"]   # [column, header, format]
    rows = [r for r in read_rows(RESULTS / entry["csv"])
            if all(r[k] == str(v) for k, v in entry.get("where", {}).items())]
    if "sort" in entry:
        rows.sort(key=lambda r: -float(r[entry["sort"]]))
    def cell(text: str, fmt: str) -> str:
        if fmt == "name":
            return page.name(text)
        if text in ("", "-", "nan"):
            return "–"
        if fmt == "{}":
            return text
        return fmt.format(float(text))

    return table([h for _, h, _ in columns], [[cell(r[c], f) for c, _, f in columns] for r in rows])


def render_weighted(page: Page, entry: dict[str, Any]) -> list[str]:
    """Per method, the mean over seeds of the device mean of final F1, with every device alike and
    weighted by each device's test samples (``bench/weighted_f1.py`` over the folder's archive)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from weighted_f1 import weighted_table
    finally:
        sys.path.remove(str(ROOT / "bench"))
    rows = weighted_table(RESULTS / entry["folder"])
    by_weight = [m for m, _, _ in sorted(rows, key=lambda r: -r[2])]
    return table(["method", "F1, devices alike", "F1, weighted by test samples", "rank, weighted"],
                 [[page.name(m), f"{plain:.3f}", f"{weighted:.3f}", str(by_weight.index(m) + 1)]
                  for m, plain, weighted in rows])


RENDERERS: dict[str, Callable[[Page, dict[str, Any]], list[str]]] = {
    "paired": render_paired, "tests": render_tests, "adversaries": render_adversaries, "table": render_table,
    "csv": render_csv, "weighted": render_weighted}


def build() -> str:
    return Page(yaml.safe_load(SPEC.read_text())).page()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare with docs/results.md")
    args = parser.parse_args(argv)
    text = build()
    if args.check:
        if PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is not what the committed results give: run `{COMMAND}`",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
