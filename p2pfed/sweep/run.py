"""One sweep from file to report: validate, expand, run the missing cells on Dask, aggregate."""

from __future__ import annotations

import sys
from pathlib import Path

from tqdm import tqdm

from p2pfed.sweep import store
from p2pfed.sweep.cells import CellSpec, expand
from p2pfed.sweep.cli import EXIT_FAILED_CELLS, EXIT_INTERRUPTED
from p2pfed.sweep.report import FILES, build_report
from p2pfed.sweep.spec import SweepError, read_sweep


def run_sweep(sweep_file: Path, out: Path | None = None, *, workers: int | None = None,
              scheduler: str | None = None, resume: bool = False, progress: bool = True) -> int:
    """Run every cell of the sweep not already finished in ``out``; exit code 0, 1 (failed cells)
    or 130 (interrupted). Bad input raises SweepError before anything runs."""
    if workers is not None and workers < 1:
        raise SweepError([f"--workers: must be at least 1 (got {workers})"])
    sweep = read_sweep(sweep_file)
    points = expand(sweep)
    out = (out or Path("runs") / sweep.name).resolve()
    if store.has_manifest(out) and not resume:
        raise SweepError([f"--out {out}: already holds a sweep; add --resume to run only its missing "
                          "cells, or choose another folder"])
    cells = list({p.cell.id: p.cell for p in points}.values())
    store.write_manifest(out, sweep.name, sweep.source, list(sweep.spec.grid), points)
    store.clear_partials(out)
    todo = [c for c in cells if not store.is_done(out, c)]
    log(f"sweep {sweep.name}: {len(points)} points, {len(cells)} cells, "
        f"{len(cells) - len(todo)} already done, {len(todo)} to run")
    if todo:
        finished = _run(todo, out, workers, scheduler, progress, sweep.name)
        if finished < len(todo):
            print(build_report(out))
            done = sum(store.is_done(out, c) for c in cells)
            log(f"interrupted: {done} of {len(cells)} cells done; "
                f"`p2pfed sweep {sweep_file} --out {out} --resume` runs the rest")
            return EXIT_INTERRUPTED
    print(build_report(out))
    log(f"results in {out}/ ({FILES}, cells/)")
    failed = [c for c in cells if not store.is_done(out, c)]
    if failed:
        log(f"{len(failed)} cell(s) failed: see the error column of sweep.csv and {out}/failed/")
    return EXIT_FAILED_CELLS if failed else 0


def _run(todo: list[CellSpec], out: Path, workers: int | None, scheduler: str | None, progress: bool,
         name: str) -> int:
    """Run the cells; returns how many finished (fewer than asked when interrupted by Ctrl-C)."""
    from p2pfed.sweep.execute import dashboard_link, dask_client, machine_cores, run_cells

    finished = 0
    bar = None
    try:
        size = None if scheduler else min(workers or machine_cores(), len(todo))
        with dask_client(size, scheduler) as client:
            link = dashboard_link(client)
            n = len(client.scheduler_info()["workers"])
            log(f"{n} Dask worker(s) on {scheduler or 'this machine'}"
                + (f"; dashboard: {link}" if link else ""))
            bar = tqdm(total=len(todo), unit="cell", desc=name, disable=not progress)

            def on_result(cell: CellSpec, error: str | None) -> None:
                nonlocal finished
                finished += 1
                bar.update(1)
                if error:
                    bar.write(f"failed: {cell.folder}: {error}", file=sys.stderr)

            run_cells(client, todo, out, on_result)
    except KeyboardInterrupt:
        pass
    finally:
        if bar is not None:
            bar.close()
    return finished


def log(message: str) -> None:
    print(message, file=sys.stderr)
