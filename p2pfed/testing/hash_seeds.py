"""Calls run in helper Python processes started with chosen hash seeds (``PYTHONHASHSEED``).

The order of a ``set`` of strings, and of anything built by iterating one, changes with the
interpreter's hash seed: equal within one process, different between two ``p2pfed run``s. The
contract runs its same-seed check in two such processes to catch it. Each helper is started once
per process and kept for later calls; a call and its result travel as pickles over its pipes.
Those pipes join this process and the helper it started, on one machine, for the contract alone:
nothing a peer sends ever reaches them (peers' messages go through the wire codec only).
"""

from __future__ import annotations

import atexit
import os
import pickle
import struct
import subprocess
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

_LENGTH = struct.Struct("<Q")
_MARK = "P2PFED_HASH_SEED_HELPER"   # set in a helper's environment
_helpers: dict[str, subprocess.Popen[bytes]] = {}


class HelperError(RuntimeError):
    """A call failed in a helper process; the message is its error's last line."""


def call_with_hash_seed(hash_seed: str, fn: Callable[..., Any], *args: Any, uses: Sequence[object] = ()) -> Any:
    """``fn(*args)`` computed in a helper process whose hash seed is ``hash_seed``, with as many
    torch threads as this process; ``fn``, its arguments and its result must pickle. ``uses``:
    classes or functions whose modules the helper must be able to import (their folders join its
    ``sys.path``, also when this process imported them from a folder since left off its path)."""
    import torch

    helper = _helper(hash_seed)
    assert helper.stdin is not None and helper.stdout is not None
    folders = [f for f in (_import_root(obj) for obj in uses) if f is not None]
    _write(helper.stdin, (folders, torch.get_num_threads(), pickle.dumps((fn, args))))
    answer = _read(helper.stdout)
    if answer is None:
        _helpers.pop(hash_seed, None)
        raise HelperError(f"the helper process with PYTHONHASHSEED={hash_seed} ended (exit {helper.wait()})")
    ok, value = answer
    if not ok:
        raise HelperError(value)
    return value


def in_helper() -> bool:
    """Whether this process is such a helper (which starts none of its own: importing a user's
    module that runs the contract at import time must not start helpers without end)."""
    return _MARK in os.environ


def _helper(hash_seed: str) -> subprocess.Popen[bytes]:
    helper = _helpers.get(hash_seed)
    if helper is None or helper.poll() is not None:
        path = os.pathsep.join(p for p in sys.path if p)
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": path, _MARK: hash_seed}
        helper = subprocess.Popen([sys.executable, "-m", "p2pfed.testing.hash_seeds"], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        _helpers[hash_seed] = helper
    return helper


def _import_root(obj: object) -> str | None:
    """The folder ``obj``'s module was imported from (the ``sys.path`` entry that finds it)."""
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    file = getattr(module, "__file__", None)
    if module is None or not file:
        return None
    path = Path(file).resolve()
    where = path.parent if path.name == "__init__.py" else path
    return str(where.parents[len(module.__name__.split(".")) - 1])


@atexit.register
def _close_helpers() -> None:
    for helper in _helpers.values():
        if helper.stdin is not None:
            helper.stdin.close()
        helper.wait(timeout=30)
    _helpers.clear()


def _write(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _read(stream: IO[bytes]) -> Any | None:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    return pickle.loads(stream.read(_LENGTH.unpack(head)[0]))


def _serve() -> None:
    """The helper's loop: calls in on stdin, results out on the original stdout (whatever the
    called code prints goes to stderr)."""
    import torch

    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    calls = sys.stdin.buffer
    while (request := _read(calls)) is not None:
        try:
            folders, threads, call = request
            sys.path[:0] = [f for f in folders if f not in sys.path]
            torch.set_num_threads(threads)
            fn, args = pickle.loads(call)
            answer: tuple[bool, Any] = (True, fn(*args))
        except BaseException as exc:   # sent back whole: the caller reports it
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            answer = (False, last)
        _write(answers, answer)


if __name__ == "__main__":
    _serve()
