"""Pool the seeds of several sweep folders of one setting into one table (issue 30: ten seeds).

A sweep's cells are keyed by the hash of their resolved scenario, which changes when a field is
added to the schema, so seeds added later with newer code land in another folder. This reads the
cells of every folder (``sweep.json``), refuses to pool cells whose resolved scenarios differ in
any field both have (apart from the seed and the swept keys), keeps one run per configuration
(method and swept values) and seed (the first folder's; a later folder's run of the same one
must give the same final F1, to six digits, or the pooling is refused: a code change would have
moved a number), and writes ``summary.csv``
and ``paired.csv`` into OUT exactly as ``p2pfed sweep`` does (the seed as the unit,
Benjamini–Hochberg over the pooled comparisons), with ``cells.csv`` naming each run's folder:

    python bench/pool_seeds.py OUT FOLDER [FOLDER ...]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from p2pfed.results.files import write_csv
from p2pfed.sweeps import store
from p2pfed.sweeps.aggregate import CellResult, collect, summary_columns, summary_rows
from p2pfed.sweeps.paired import COLUMNS as PAIRED_COLUMNS
from p2pfed.sweeps.paired import label, paired_rows


def differing(a: dict[str, Any], b: dict[str, Any], ignore: set[str], where: str = "") -> list[str]:
    """Dotted names of the fields both resolved scenarios have and give different values."""
    out = []
    for key in sorted(set(a) & set(b)):
        name = f"{where}{key}"
        if name in ignore:
            continue
        if isinstance(a[key], dict) and isinstance(b[key], dict):
            out += differing(a[key], b[key], ignore, f"{name}.")
        elif a[key] != b[key]:
            out.append(name)
    return out


def pool(folders: list[Path]) -> tuple[list[str], list[CellResult]]:
    """(the swept keys, every point — method, swept values, seed — once across ``folders``, each
    with the first run of its configuration and seed: a method that ignores a swept key has one
    run per seed, listed under each value as ``p2pfed sweep`` lists it); raises
    SystemExit naming what cannot be pooled: folders sweeping other keys, a run of another
    setting (a field other than the seed and the swept keys; within one configuration, any field
    but the seed), a repeated run with another final F1, an unfinished cell."""
    kept: dict[tuple[str, tuple, int], CellResult] = {}     # (method, swept values, seed) -> its run
    runs: dict[tuple[str, int], CellResult] = {}            # (configuration, seed) -> its first run
    first: dict[str, CellResult] = {}                       # configuration -> its first run
    keys: list[str] | None = None
    reference: CellResult | None = None                     # the first run: its setting is the pool's
    for folder in folders:
        _, folder_keys, points = store.read_manifest(folder)
        if keys is not None and folder_keys != keys:
            raise SystemExit(f"{folder}: sweeps {folder_keys}, not {keys} as {folders[0]}")
        keys = folder_keys
        for r in collect(folder, points):
            if r.summary is None:
                raise SystemExit(f"{folder}: {r.point.method} seed {r.point.seed} is {r.status}")
            config, name = r.summary["config"], label(r)
            reference = reference or r
            mate = first.setdefault(name, r)   # this configuration's first run: every field but the seed agrees
            assert reference.summary is not None and mate.summary is not None
            diff = differing(reference.summary["config"], config, {"seed", "algorithm", *keys})
            diff += differing(mate.summary["config"], config, {"seed"})
            if diff:
                fields = ", ".join(sorted(set(diff)))
                raise SystemExit(f"{r.folder}: another setting than {reference.folder} ({fields})")
            earlier = runs.setdefault((name, r.point.seed), r)   # the same run in another folder or point
            assert earlier.summary is not None
            if round(earlier.summary["final"]["f1_macro_mean"], 6) != round(r.summary["final"]["f1_macro_mean"], 6):
                raise SystemExit(f"{r.folder} and {earlier.folder}: {name} seed {r.point.seed} gave another F1")
            kept.setdefault((r.point.method, r.point.values, r.point.seed),
                            replace(r, folder=earlier.folder, summary=earlier.summary, stored=earlier.stored))
    return keys or [], list(kept.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("folders", nargs="+")
    args = parser.parse_args(argv)
    out = Path(args.out)
    keys, results = pool([Path(f) for f in args.folders])
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "summary.csv", summary_columns(keys), summary_rows(results, keys))
    write_csv(out / "paired.csv", PAIRED_COLUMNS, paired_rows(results))
    write_csv(out / "cells.csv", ["configuration", "seed", "folder", "f1_macro_mean", "git_commit"],
              [{"configuration": label(r), "seed": r.point.seed, "folder": str(r.folder),
                "f1_macro_mean": (r.summary or {})["final"]["f1_macro_mean"],
                "git_commit": (r.summary or {})["code"]["git_commit"]} for r in results])
    print(f"{len(results)} runs pooled into {out}/ (summary.csv, paired.csv, cells.csv)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
