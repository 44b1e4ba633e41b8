"""The Python API: run, compare and sweep scenarios from a script or a notebook.

``p2pfed.run`` is ``p2pfed run`` as a function: a scenario file, a mapping, a run spec from
``p2pfed.load``, or None (the embedded quickstart), the same overrides, and a ``Run`` back whose
``rounds`` and ``devices`` are the rows of ``rounds.csv`` and ``devices.csv`` as pandas DataFrames
and whose ``summary`` is ``summary.json``; files are written only when ``out`` is given. A method
or a model may be a class or a function of the caller's own (named to the runtime as
``module:name``)::

    import p2pfed
    run = p2pfed.run("scenarios/quickstart.yaml", algorithm="gossip-avg", rounds=20)
    run.rounds.plot(x="round", y="f1_macro_mean")
    table = p2pfed.compare("scenarios/quickstart.yaml", ["fedsub", "local"], rounds=10)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from p2pfed.engine.runner import Simulated, simulate, write_results
from p2pfed.results.callbacks import Callback
from p2pfed.results.compare import comparison_row
from p2pfed.results.files import (DEVICE_COLUMNS, DEVICE_OCCASIONAL_COUNTERS, DEVICE_PROTOCOL_COLUMNS, ROUND_COLUMNS,
                                  device_rows, folder_label)
from p2pfed.scenario.loader import load_mapping, load_scenario
from p2pfed.scenario.spec import RunSpec

if TYPE_CHECKING:
    import pandas as pd

Scenario = str | Path | Mapping[str, Any] | RunSpec | None
Overrides = Mapping[str, Any] | Sequence[str]


@dataclass(frozen=True)
class Run:
    """One simulated run: ``rounds`` (one row per evaluation), ``devices`` (one row per device, at
    the end), ``summary`` (``summary.json``) and ``out``, the results folder if one was written."""

    summary: dict[str, Any]
    rounds: pd.DataFrame
    devices: pd.DataFrame
    out: Path | None = None

    @property
    def f1(self) -> float:
        """The final mean macro-F1 over devices."""
        return float(self.summary["final"]["f1_macro_mean"])

    def plot(self, path: str | Path | None = None) -> Any:
        """Mean macro-F1 and megabytes sent per round (``plot.png``): a matplotlib Figure, also
        saved to ``path`` if given."""
        from p2pfed.results.plots import comparison_figure, save_figure

        figure = comparison_figure({"": self.rounds.to_dict("records")},
                                   title=f"{self.summary['scenario']} — {self.summary['algorithm']}")
        if path is not None:
            save_figure(figure, Path(path), close=False)
        return figure


def load(scenario: Scenario = None, *, algorithm: str | type | None = None,
         model: str | Callable[..., Any] | None = None, rounds: int | None = None, seed: int | None = None,
         overrides: Overrides = ()) -> RunSpec:
    """The scenario's run spec, validated, with these changes — what ``run`` runs (a bad one raises
    ``ScenarioError`` with one line per problem). ``overrides`` as a mapping, ``{"training.lr":
    0.1}``, and the keyword arguments are set as the Python values they are; as a list of
    ``key=value`` texts they are read as ``--set`` reads them (YAML). A run spec given with no
    changes is returned as it is (its federation, graph and contacts built once for every use)."""
    if isinstance(scenario, RunSpec) and not (overrides or rounds is not None or seed is not None
                                              or model is not None or algorithm is not None):
        return scenario
    texts = [] if isinstance(overrides, Mapping) else list(overrides)
    values = dict(overrides) if isinstance(overrides, Mapping) else {}
    if rounds is not None:
        values["rounds"] = int(rounds)
    if model is not None:
        values["model.name"] = _name_of(model)
    if algorithm is not None:
        values["algorithm.name"] = _name_of(algorithm)
    if isinstance(scenario, RunSpec):   # changed: its resolved scenario, loaded again with them
        loaded = load_mapping(scenario.scenario.model_dump(), scenario.source, scenario.base_dir, texts, seed, values)
    elif isinstance(scenario, Mapping):   # relative paths in it resolve against the working directory
        loaded = load_mapping(dict(scenario), "<scenario mapping>", Path.cwd(), texts, seed, values)
    else:
        loaded = load_scenario(scenario, texts, seed, values)
    if loaded.swapped is not None:
        loaded.swapped.log()
    return loaded


def run(scenario: Scenario = None, *, algorithm: str | type | None = None,
        model: str | Callable[..., Any] | None = None, rounds: int | None = None, seed: int | None = None,
        overrides: Overrides = (), out: str | Path | None = None, progress: bool = False,
        callbacks: Sequence[Callback] = ()) -> Run:
    """Simulate ``scenario`` (a file, a mapping, a run spec, or None for the embedded quickstart)
    with the given method, model, rounds, seed and ``overrides`` (``{"training.lr": 0.1}`` or
    ``["training.lr=0.1"]``, as ``--set``); write the results files to ``out`` if given.
    ``callbacks`` hear each evaluation as it completes (``p2pfed.results.callbacks``)."""
    from p2pfed.engine.preflight import preflight

    loaded = load(scenario, algorithm=algorithm, model=model, rounds=rounds, seed=seed, overrides=overrides)
    preflight(loaded)
    done = simulate(loaded, progress=progress, callbacks=callbacks)
    assert done is not None   # only a checkpointed run stops early
    folder = None
    if out is not None:
        folder = Path(out)
        write_results(done, folder, loaded.scenario.name)
    return _run_of(done, folder)


def compare(scenario: Scenario = None, algorithms: Sequence[str | type] = ("fedsub", "gossip-avg", "local"),
            **options: Any) -> pd.DataFrame:
    """``p2pfed compare`` as a table: one row per method (the columns of ``comparison.csv``),
    each run with ``run``'s ``options`` (rounds, seed, overrides, ...; ``out`` is a folder
    holding one subfolder per method)."""
    out = options.pop("out", None)
    rows = []
    for method in algorithms:
        name = _name_of(method)
        where = None if out is None else Path(out) / folder_label(name)
        rows.append(comparison_row(run(scenario, algorithm=method, out=where, **options).summary))
    return _table(rows)


def sweep(sweep_file: str | Path, out: str | Path, *, overrides: Sequence[str] = (), seeds: Sequence[int] | None = None,
          workers: int | None = None, resume: bool = False, progress: bool = False) -> pd.DataFrame:
    """``p2pfed sweep`` (Dask workers on this machine): runs the missing cells into ``out`` and
    returns ``summary.csv`` (one row per method and swept values, means and intervals over seeds)."""
    import pandas as pd

    from p2pfed.sweeps.run import run_sweep

    run_sweep(Path(sweep_file), Path(out), workers=workers, resume=resume, progress=progress,
              overrides=overrides, seeds=seeds)
    return pd.read_csv(Path(out) / "summary.csv")


def _table(rows: Any, columns: list[str] | None = None) -> pd.DataFrame:
    """A pandas DataFrame (pandas imported here: only the Python API's tables need it)."""
    import pandas as pd

    return pd.DataFrame(rows, columns=columns)


def _run_of(done: Simulated, out: Path | None) -> Run:
    rounds = _table(done.recorder.rows)
    columns = [c for c in ROUND_COLUMNS if c in rounds] + [c for c in rounds if c not in ROUND_COLUMNS]
    device_table = device_rows(done.recorder, done.names)
    optional = DEVICE_PROTOCOL_COLUMNS + DEVICE_OCCASIONAL_COUNTERS
    devices = _table(device_table, DEVICE_COLUMNS + [c for c in optional
                                               if any(c in d for d in device_table)])
    return Run(done.summary, rounds[columns] if len(rounds) else rounds, devices, out)


def _name_of(thing: str | type | Callable[..., Any]) -> str:
    """A method or model as the runtime names it: a string as given, a class or function of the
    caller's own as ``module:qualified name`` (importable from where it was defined)."""
    if isinstance(thing, str):
        return thing
    module, qualname = getattr(thing, "__module__", None), getattr(thing, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname:
        raise ValueError(f"{thing!r}: pass a class or function defined at the top level of a module "
                         "(or its name as module:Name)")
    return f"{module}:{qualname}"

