"""Pool the seeds of several sweep folders of one setting into one table (issue 30: ten seeds).

A sweep's cells are keyed by the hash of their resolved scenario, which changes when a field is
added to the schema, so seeds added later with newer code land in another folder. This reads the
cells of every folder (``sweep.json``), refuses to pool cells whose resolved scenarios differ in
any field both have (apart from the seed), keeps one run per method and seed (the first folder's;
a later folder's run of the same method and seed must give the same final F1, to six digits, or
the pooling is refused: the code change would have moved a number), and writes ``summary.csv``
and ``paired.csv`` into OUT exactly as ``p2pfed sweep`` does (the seed as the unit,
Benjamini–Hochberg over the pooled comparisons), with ``cells.csv`` naming each run's folder:

    python bench/pool_seeds.py OUT FOLDER [FOLDER ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from p2pfed.results.files import write_csv
from p2pfed.sweeps import store
from p2pfed.sweeps.aggregate import CellResult, collect, summary_columns, summary_rows
from p2pfed.sweeps.paired import COLUMNS as PAIRED_COLUMNS
from p2pfed.sweeps.paired import paired_rows


def differing(a: dict[str, Any], b: dict[str, Any], where: str = "") -> list[str]:
    """Dotted names of the fields both resolved scenarios have and give different values."""
    out = []
    for key in sorted(set(a) & set(b)):
        name = f"{where}{key}"
        if isinstance(a[key], dict) and isinstance(b[key], dict):
            out += differing(a[key], b[key], f"{name}.")
        elif a[key] != b[key] and name != "seed":
            out.append(name)
    return out


def pool(folders: list[Path]) -> list[CellResult]:
    """One finished run per method and seed across ``folders``; raises SystemExit naming what
    cannot be pooled."""
    kept: dict[tuple[str, int], CellResult] = {}
    reference: CellResult | None = None
    for folder in folders:
        _, _, points = store.read_manifest(folder)
        for r in collect(folder, points):
            if r.summary is None:
                raise SystemExit(f"{folder}: {r.point.method} seed {r.point.seed} is {r.status}")
            if reference is None:
                reference = r
            assert reference.summary is not None
            config = {k: v for k, v in r.summary["config"].items() if k != "algorithm"}
            base = {k: v for k, v in reference.summary["config"].items() if k != "algorithm"}
            if diff := differing(base, config):
                raise SystemExit(f"{r.folder}: another setting than {reference.folder} ({', '.join(diff)})")
            key = (r.point.method, r.point.seed)
            if key in kept:
                first = kept[key].summary
                assert first is not None
                if round(first["final"]["f1_macro_mean"], 6) != round(r.summary["final"]["f1_macro_mean"], 6):
                    raise SystemExit(f"{r.folder} and {kept[key].folder}: {key} gave different F1")
                continue
            kept[key] = r
    return sorted(kept.values(), key=lambda r: (r.point.method, r.point.seed))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("folders", nargs="+")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = pool([Path(f) for f in args.folders])
    write_csv(out / "summary.csv", summary_columns([]), summary_rows(results, []))
    write_csv(out / "paired.csv", PAIRED_COLUMNS, paired_rows(results))
    write_csv(out / "cells.csv", ["method", "seed", "folder", "f1_macro_mean", "git_commit"],
              [{"method": r.point.method, "seed": r.point.seed, "folder": str(r.folder),
                "f1_macro_mean": (r.summary or {})["final"]["f1_macro_mean"],
                "git_commit": (r.summary or {})["code"]["git_commit"]} for r in results])
    print(f"{len(results)} runs pooled into {out}/ (summary.csv, paired.csv, cells.csv)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
