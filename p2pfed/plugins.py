"""Code of the user's own, named in a scenario: ``package.module:Name`` or ``path/to/file.py:Name``.

A researcher brings a method (``algorithm.name``) or a model (``model.name``) from their own code
without editing p2pfed. The same name must find the same code in every process that runs part of
the work — the simulator, each launched peer, each Dask worker, a helper process — so it is
resolved the same way everywhere, against the scenario's folder and the working directory:

- ``path/to/file.py:Name``: the file, relative to those folders (or absolute); its folder is put
  on ``sys.path`` and it is imported under its own name, so pickles of what it defines (work sent
  to a helper process) resolve in any process that has the folder on its path;
- ``package.module:Name``: an importable module, looked up on ``sys.path`` with those folders
  added.

Every file loaded is remembered with its SHA-256 (``loaded_code``): results, checkpoints and sweep
cells record it, so a result says which version of the user's code made it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any


class PluginError(ValueError):
    """A name of the user's code that cannot be loaded (one line saying why)."""


@dataclass(frozen=True)
class LoadedCode:
    """Where a name's code came from: its module's file and that file's SHA-256."""

    name: str
    path: str
    sha256: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "sha256": self.sha256}


_loaded: dict[str, LoadedCode] = {}


def is_plugin_name(name: str) -> bool:
    """Whether ``name`` names code of the user's own (``module:Name``) rather than a built-in."""
    return ":" in name


def load_object(name: str, search: Sequence[Path] = (), *, what: str) -> Any:
    """The object ``name`` (``module:attr`` or ``file.py:attr``) names, importing its module;
    ``search``: folders a relative file or a module is looked for in (the scenario's folder), after
    the working directory. ``what`` names the field in errors (``algorithm.name``)."""
    module_part, _, attr = name.rpartition(":")
    if not module_part or not attr:
        raise PluginError(f"{what}: {name!r}: expected module:Name or path/to/file.py:Name")
    folders = [*(Path(s) for s in search), Path.cwd()]
    if module_part.endswith(".py"):
        module = _import_file(module_part, folders, what=what, name=name)
    else:
        module = _import_module(module_part, folders, what=what, name=name)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{what}: {name!r}: {module.__name__} has no {attr!r}")
        obj = getattr(obj, part)
    _remember(name, module)
    return obj


def entry_point(group: str, name: str) -> Any | None:
    """The object an installed package registers under ``name`` in entry-point ``group``
    (``p2pfed.algorithms``, ``p2pfed.models``), or None."""
    for ep in metadata.entry_points(group=group):
        if ep.name == name:
            obj = ep.load()
            module = sys.modules.get(ep.module)
            if module is not None:
                _remember(name, module)
            return obj
    return None


def entry_point_names(group: str) -> list[str]:
    return sorted({ep.name for ep in metadata.entry_points(group=group)})


def loaded_code(names: Sequence[str] | None = None) -> dict[str, dict[str, str]]:
    """``{name: {"path", "sha256"}}`` of the user's code loaded so far (or of ``names``)."""
    keys = sorted(_loaded) if names is None else [n for n in names if n in _loaded]
    return {n: _loaded[n].to_dict() for n in keys}


def path_entries() -> list[str]:
    """The ``sys.path`` folders the loaded code needs: what a child process must have on its
    path (``PYTHONPATH`` of launched peers) to import it by name."""
    return sorted(_added)


_added: set[str] = set()


def _on_path(folder: Path) -> None:
    entry = str(folder.resolve())
    if entry not in sys.path:
        sys.path.insert(0, entry)
    _added.add(entry)


def _import_file(module_part: str, folders: list[Path], *, what: str, name: str) -> Any:
    candidates = [Path(module_part).expanduser()]
    if not candidates[0].is_absolute():
        candidates = [f / module_part for f in folders]
    path = next((c.resolve() for c in candidates if c.is_file()), None)
    if path is None:
        looked = ", ".join(str(c) for c in candidates)
        raise PluginError(f"{what}: {name!r}: file not found (looked at {looked})")
    module_name = path.stem
    if not module_name.isidentifier():
        raise PluginError(f"{what}: {name!r}: {path.name} is not a Python module name (letters, digits, _)")
    existing = sys.modules.get(module_name)
    if existing is not None:
        if Path(getattr(existing, "__file__", "") or "").resolve() == path:
            return existing
        raise PluginError(f"{what}: {name!r}: a module named {module_name!r} is already imported from "
                          f"{getattr(existing, '__file__', 'elsewhere')}; rename {path.name}")
    _on_path(path.parent)
    return _run_import(module_name, what=what, name=name)


def _import_module(module_part: str, folders: list[Path], *, what: str, name: str) -> Any:
    if module_part in sys.modules:
        return sys.modules[module_part]
    top = module_part.split(".")[0]
    for folder in folders:
        if (folder / top).is_dir() or (folder / f"{top}.py").is_file():
            _on_path(folder)
            break
    return _run_import(module_part, what=what, name=name)


def _run_import(module_name: str, *, what: str, name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise PluginError(f"{what}: {name!r}: no module {module_name!r} (looked on sys.path, in the "
                              f"scenario's folder and in the working directory)") from None
        raise PluginError(f"{what}: {name!r}: importing {module_name} failed: {exc}") from None
    except Exception as exc:   # the user's module raised while importing
        raise PluginError(f"{what}: {name!r}: importing {module_name} failed: "
                          f"{type(exc).__name__}: {exc}") from None


def _remember(name: str, module: Any) -> None:
    """Record the module's file and hash, and the folder a child process needs on its path to
    import it by name (also when the user imported it before p2pfed looked for it)."""
    file = getattr(module, "__file__", None)
    if not file:
        return
    path = Path(file).resolve()
    stat = path.stat()
    _loaded[name] = LoadedCode(name, str(path), _sha256(str(path), stat.st_mtime_ns, stat.st_size))
    where = path.parent if path.name == "__init__.py" else path
    _added.add(str(where.parents[len(module.__name__.split(".")) - 1]))


@functools.lru_cache(maxsize=256)
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    """A file's SHA-256, read again only when the file changed (a run resolves its method once
    per device)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_importable(name: str, search: Sequence[Path], *, what: str) -> None:
    """Load ``name`` in a fresh Python process the way a launched peer or a Dask worker does
    (same working directory, ``PYTHONPATH`` as launched peers get it): a PluginError if it fails
    there (``p2pfed validate --launch``)."""
    import os
    import subprocess

    code = ("import sys; from pathlib import Path; from p2pfed.plugins import load_object; "
            "load_object(sys.argv[1], [Path(p) for p in sys.argv[3:]], what=sys.argv[2])")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path_entries(), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code, name, what, *(str(s) for s in search)],
                          capture_output=True, text=True, env=env, timeout=120)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise PluginError(f"{what}: {name!r} does not load in a new process: {last}")
