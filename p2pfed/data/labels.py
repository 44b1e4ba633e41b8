"""Checking a user's label and device columns and mapping labels to class ids 0..C-1.

The mapping is global: it is computed over every file and device together, so a label means the
same class id on every device. Without ``class_names`` the distinct labels are sorted (numbers
numerically, strings alphabetically) and numbered in that order; the original labels become the
class names shown in results. With ``class_names`` the label space is fixed: integer labels are
class ids into that list (0..len-1) and string labels must be one of its names.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .tables import RawTable


def is_numeric(values: np.ndarray) -> bool:
    return values.dtype.kind == "f"


def show(value: object) -> str:
    """A label or device value as a user wrote it: 3.0 -> '3', 'walk' -> 'walk'."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _missing(values: np.ndarray) -> np.ndarray:
    return np.isnan(values) if is_numeric(values) else values == ""


def label_problems(table: RawTable, label_column: str, class_names: Sequence[str] | None) -> list[str]:
    """Missing labels, non-integer numbers, and labels outside ``class_names``."""
    y = table.labels
    problems = []
    missing = _missing(y)
    problems += _first_at(table, label_column, y, missing, lambda v: "missing label")
    if is_numeric(y):
        present = ~missing
        fractional = present & (y != np.round(np.where(present, y, 0)))
        problems += _first_at(table, label_column, y, fractional,
                              lambda v: f"label {show(v)} is not an integer class id")
        if class_names is not None:
            out = present & ~fractional & ((y < 0) | (y >= len(class_names)))
            problems += _first_at(table, label_column, y, out,
                                  lambda v: f"label {show(v)} is out of range 0..{len(class_names) - 1} "
                                            f"(dataset.class_names has {len(class_names)} names)")
    elif class_names is not None:
        unknown = ~missing & ~np.isin(y, list(class_names))
        problems += _first_at(table, label_column, y, unknown,
                              lambda v: f"label {str(v)!r} is not one of dataset.class_names")
    return problems


def owner_problems(table: RawTable, device_column: str) -> list[str]:
    """Rows without a device."""
    assert table.owners is not None
    return _first_at(table, device_column, table.owners, _missing(table.owners), lambda v: "missing device")


def _first_at(table: RawTable, column: str, values: np.ndarray, mask: np.ndarray,
              describe) -> list[str]:
    """One line for the rows in ``mask``: the first one, located, and how many more."""
    bad = np.flatnonzero(mask)
    if not len(bad):
        return []
    i = int(bad[0])
    more = f" (and {len(bad) - 1} more rows)" if len(bad) > 1 else ""
    return [f"{table.source}: column {column!r}: {describe(values[i])} ({table.where(i)}){more}"]


def encode_labels(labels: Sequence[np.ndarray],
                  class_names: Sequence[str] | None) -> tuple[list[np.ndarray], list[str]]:
    """Class ids (int64) for each array of checked labels, and the class names, in id order."""
    if class_names is not None:
        index = {name: i for i, name in enumerate(class_names)}
        ids = [y.astype(np.int64) if is_numeric(y) else np.array([index[v] for v in y], dtype=np.int64)
               for y in labels]
        return ids, [str(c) for c in class_names]
    if all(is_numeric(y) for y in labels):
        values = np.unique(np.concatenate(labels))
        return [np.searchsorted(values, y).astype(np.int64) for y in labels], [show(v) for v in values]
    as_text = [y if not is_numeric(y) else np.array([show(v) for v in y], dtype=str) for y in labels]
    values = np.unique(np.concatenate(as_text))
    return [np.searchsorted(values, y).astype(np.int64) for y in as_text], [str(v) for v in values]


def owner_keys(owners: np.ndarray) -> np.ndarray:
    """Device values ready to group by: integer-valued numbers as int64, else as they are."""
    if is_numeric(owners) and np.all(owners == np.round(owners)):
        return owners.astype(np.int64)
    return owners
