"""Reading ``.npz`` files users supply, safely and with one clear error naming the file.

Why a helper: ``np.load`` reports a damaged or wrong-format file in many ways (``BadZipFile``,
``zlib.error``, ``EOFError``, a confusing "pickled data" ``ValueError`` for a file that is not a
zip at all, a plain array for an ``.npy``), none of which names the file. Objects are never
unpickled (``allow_pickle=False``).
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


class NpzFileError(ValueError):
    """An ``.npz`` file that cannot be read as the arrays asked for (names the file)."""


def load_npz(path: str | Path, required: Sequence[str]) -> dict[str, np.ndarray]:
    """The ``required`` arrays of the ``.npz`` at ``path``, fully read."""
    path = Path(path)
    if not path.is_file():
        raise NpzFileError(f"{path}: file not found")
    if not zipfile.is_zipfile(path):
        raise NpzFileError(f"{path}: not an .npz file (an .npz is a zip archive of .npy arrays)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in required if k not in npz.files]
            if missing:
                raise NpzFileError(f"{path}: missing array(s) {missing} (needs {list(required)})")
            arrays = {}
            for key in required:
                try:
                    arrays[key] = np.asarray(npz[key])
                except READ_ERRORS as exc:
                    raise NpzFileError(f"{path}: array {key!r} cannot be read: {_reason(exc)}") from None
            return arrays
    except NpzFileError:
        raise
    except READ_ERRORS as exc:
        raise NpzFileError(f"{path}: damaged .npz file: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    text = str(exc).split("\n", 1)[0]
    if "allow_pickle" in text:
        return "it holds Python objects, which are never unpickled"
    return text or type(exc).__name__
