"""One sweep from file to report: validate, expand, run the missing cells on Dask, aggregate."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from p2pfed.extras import require
from p2pfed.sweeps import store
from p2pfed.sweeps.archive import unpack
from p2pfed.sweeps.cells import CellSpec, expand
from p2pfed.sweeps.compat import adopt_older_cells
from p2pfed.sweeps.report import FILES, build_report
from p2pfed.sweeps.spec import SweepError, read_sweep

EXIT_FAILED_CELLS = 1   # some cells failed; the others ran and the report is written
EXIT_INTERRUPTED = 130  # Ctrl-C: finished cells are kept for --resume


def run_sweep(sweep_file: Path, out: Path | None = None, *, workers: int | None = None,
              scheduler: str | None = None, resume: bool = False, progress: bool = True,
              overrides: Sequence[str] = (), seeds: Sequence[int] | None = None) -> int:
    """Run every cell of the sweep not already finished in ``out``; exit code 0, 1 (failed cells)
    or 130 (interrupted). Bad input raises SweepError before anything is written. ``overrides``
    and ``seeds``: ``--set`` and ``--seeds`` (``read_sweep``)."""
    require("distributed", extra="sweeps", package="Dask", needed_by="p2pfed sweep")
    from p2pfed.sweeps.execute import dask_client, machine_cores

    if workers is not None and workers < 1:
        raise SweepError([f"--workers: must be at least 1 (got {workers})"])
    sweep = read_sweep(sweep_file, overrides, seeds)
    points = expand(sweep)
    out = (out or Path("runs") / sweep.name).resolve()
    if store.has_manifest(out) and not resume:
        raise SweepError([f"--out {out}: already holds a sweep; add --resume to run only its missing "
                          "cells, or choose another folder"])
    if resume:
        if unpacked := unpack(out):
            log(f"{unpacked} cell(s) of the folder's archive written back into {out / 'cells'}/")
        kept, other = adopt_older_cells(out, points)
        if kept:
            log(f"{kept} finished cell(s) written under older keys run the same scenarios: kept under their new keys")
        if other:
            log(f"{other} finished cell(s) written under older keys ran other scenarios (a field since removed "
                "or changed; see their summary.json config): they run again")
    cells = list({p.cell.id: p.cell for p in points}.values())
    todo = [c for c in cells if not store.is_done(out, c)]
    log(f"sweep {sweep.name}: {len(points)} points, {len(cells)} cells, "
        f"{len(cells) - len(todo)} already done, {len(todo)} to run")
    interrupted = False
    if todo:
        size = None if scheduler else min(workers or machine_cores(), len(todo))
        try:
            with dask_client(size, scheduler) as client:  # a scheduler that cannot be reached writes nothing
                store.write_manifest(out, sweep.name, sweep.source, list(sweep.spec.grid), points)
                store.clear_partials(out)
                interrupted = not _run(client, todo, out, scheduler, progress, sweep.name)
        except KeyboardInterrupt:  # during the cluster's start or shutdown
            interrupted = True
    else:
        store.write_manifest(out, sweep.name, sweep.source, list(sweep.spec.grid), points)
    if store.has_manifest(out):  # not when Ctrl-C came before the cluster was up
        print(build_report(out))
    if interrupted:
        done = sum(store.is_done(out, c) for c in cells)
        log(f"interrupted: {done} of {len(cells)} cells done; "
            f"`p2pfed sweep {sweep_file} --out {out} --resume` runs the rest")
        return EXIT_INTERRUPTED
    log(f"results in {out}/ ({FILES}, cells/)")
    failed = [c for c in cells if not store.is_done(out, c)]
    if failed:
        log(f"{len(failed)} cell(s) failed: see the error column of sweep.csv and {out}/failed/")
    return EXIT_FAILED_CELLS if failed else 0


def _run(client, todo: list[CellSpec], out: Path, scheduler: str | None, progress: bool, name: str) -> bool:
    """Run the cells with a progress bar; False when Ctrl-C stopped them."""
    from p2pfed.sweeps.execute import dashboard_link, run_cells

    link = dashboard_link(client)
    log(f"{len(client.scheduler_info()['workers'])} Dask worker(s) on {scheduler or 'this machine'}"
        + (f"; dashboard: {link}" if link else ""))
    bar = tqdm(total=len(todo), unit="cell", desc=name, disable=not progress)

    def on_result(cell: CellSpec, error: str | None) -> None:
        bar.update(1)
        if error:
            bar.write(f"failed: {cell.folder}: {error}", file=sys.stderr)

    try:
        run_cells(client, todo, out, on_result)
        return True
    except KeyboardInterrupt:
        return False
    finally:
        bar.close()


def log(message: str) -> None:
    print(message, file=sys.stderr)
