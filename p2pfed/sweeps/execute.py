"""Running cells on Dask distributed: a LocalCluster sized to the machine, or an existing scheduler.

Each cell is one Dask task (``run_cell``) that rebuilds its scenario from plain data, runs it
into a partial folder and renames it into place. Workers are processes with one thread each
(one run per process at a time; torch limited to one thread), so results do not depend on how
many workers there are. On a cluster, every worker must see the sweep's output folder and the
scenario's files at the same paths (a shared file system) and have the same p2pfed installed.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from distributed import Client, LocalCluster, as_completed
from distributed.diagnostics.plugin import WorkerPlugin

from p2pfed.sweeps import store
from p2pfed.sweeps.cells import CellSpec, cell_id, resolve
from p2pfed.scenario.threads import WORKER_THREADS_ENV, machine_cores
from p2pfed.sweeps.spec import SweepError


class OneTorchThread(WorkerPlugin):
    """One torch thread per worker process: workers, not threads, give the parallelism."""

    name = "p2pfed-one-torch-thread"

    def setup(self, worker: Any) -> None:
        import torch
        os.environ[WORKER_THREADS_ENV] = "1"   # engine.torch_threads: auto then means one here
        torch.set_num_threads(1)


@contextmanager
def dask_client(workers: int | None = None, scheduler: str | None = None) -> Iterator[Client]:
    """A client on an existing scheduler, or on a LocalCluster of ``workers`` one-thread processes."""
    cluster = None
    if logging.getLogger().getEffectiveLevel() > logging.INFO:  # Dask's INFO lines only with -v
        logging.getLogger("distributed").setLevel(logging.ERROR)
    if scheduler:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise SweepError([f"--scheduler {scheduler}: cannot connect: {exc}"]) from None
    else:
        with sigint_ignored():  # Ctrl-C reaches the whole process group: only this process handles it
            cluster = LocalCluster(n_workers=workers or machine_cores(), threads_per_worker=1, processes=True,
                                   dashboard_address=":0", silence_logs=logging.ERROR)  # any free port
        client = Client(cluster)
    try:
        client.register_plugin(OneTorchThread())
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """Processes started inside inherit an ignored SIGINT (Python keeps it ignored at start-up)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def dashboard_link(client: Client) -> str | None:
    """The Dask dashboard's address, when the scheduler serves one and bokeh can draw it."""
    if importlib.util.find_spec("bokeh") is None or "dashboard" not in client.scheduler_info().get("services", {}):
        return None
    return client.dashboard_link


def run_cell(cell: dict[str, Any], out: str) -> dict[str, Any]:
    """The Dask task: one cell, written exactly as ``p2pfed run`` writes it; errors are recorded, not raised."""
    from p2pfed.engine.runner import run_scenario

    spec, out_dir = CellSpec.from_dict(cell), Path(out)
    partial = store.partial_dir(out_dir, spec)
    try:
        loaded = resolve(spec.scenario, spec.method, spec.seed, spec.overrides)
        if cell_id(loaded) != spec.id:
            raise RuntimeError("this worker resolves the cell to another scenario than the client did "
                               "(a different p2pfed version or data file on the worker?)")
        run_scenario(loaded, partial, progress=False)
        store.commit(out_dir, spec, partial)
        return {"id": spec.id, "error": None}
    except Exception as exc:  # a failed cell is a result of the sweep, not the end of it
        shutil.rmtree(partial, ignore_errors=True)
        error = one_line(exc)
        store.record_failure(out_dir, spec, error, traceback.format_exc())
        return {"id": spec.id, "error": error}


def one_line(exc: BaseException) -> str:
    """An exception as one line for sweep.csv (a multi-line message joined with ' | ')."""
    return " | ".join(f"{type(exc).__name__}: {exc}".strip().splitlines())


def run_cells(client: Client, cells: list[CellSpec], out: Path,
              on_result: Callable[[CellSpec, str | None], None]) -> None:
    """Submit every cell, call ``on_result(cell, error or None)`` as each finishes.

    Ctrl-C cancels what has not finished and re-raises KeyboardInterrupt; finished cells stay.
    """
    futures = {client.submit(run_cell, c.to_dict(), str(out), key=f"p2pfed-cell-{c.id}", pure=False): c
               for c in cells}
    try:
        for future in as_completed(futures):
            cell = futures[future]
            try:
                error = future.result()["error"]
            except Exception as exc:  # the worker died (KilledWorker) or the task was lost
                error = one_line(exc)
                store.record_failure(out, cell, error)
            on_result(cell, error)
    except KeyboardInterrupt:
        client.cancel(list(futures), force=True)
        raise
