"""Reading a user's data file into raw columns: CSV, Parquet or ``.npz`` (never pickle).

A reader only parses and checks what one file can tell: required columns exist, features are
numbers. Labels and devices are returned raw (numbers, or strings) for ``labels.py`` and the
loader to check and encode across files. A file that cannot be read as a table raises a
``DataError`` at once; bad values are collected in ``RawTable.problems`` (one line each naming
the file and column) so the loader reports them together with the label problems.
"""

from __future__ import annotations

import csv
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import DataError

TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
MISSING = {"", "nan", "na", "null", "none"}   # cells read as missing (case-insensitive)


@dataclass
class RawTable:
    """One file's columns before labels and devices are checked."""

    source: Path
    x: np.ndarray                 # float64 (n, features); NaN = missing, imputed later
    feature_names: list[str]
    labels: np.ndarray            # float64 (NaN = missing) or str ('' = missing)
    owners: np.ndarray | None     # the device column (float64 or str), None when not read
    unit: str = "line"            # how a row is named in messages: CSV lines, else row index
    refs: np.ndarray | None = None  # CSV: the file line of each row
    problems: list[str] = field(default_factory=list)  # bad values found while reading

    def where(self, i: int) -> str:
        return f"{self.unit} {self.refs[i] if self.refs is not None else i}"

    def __len__(self) -> int:
        return len(self.labels)


def read_table(path: Path, label_column: str, device_column: str | None) -> RawTable:
    """Read a CSV, Parquet or single ``.npz`` file; ``device_column`` None: not needed (a
    column of that name is then still kept out of the features)."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _read_csv(path, label_column, device_column)
    if suffix in (".parquet", ".pq"):
        return _read_parquet(path, label_column, device_column)
    if suffix == ".npz":
        return read_npz(path, label_column, device_column)
    raise DataError([f"{path}: unknown data format {path.suffix!r} (use .csv, .parquet, .npz "
                     f"or a folder of per-device .npz files)"])


def _numeric(cells: list[str]) -> tuple[np.ndarray | None, int]:
    """Cells as float64 (missing -> NaN); on failure (None, index of the first bad cell)."""
    cleaned = ["nan" if c.strip().lower() in MISSING else c for c in cells]
    try:
        return np.asarray(cleaned, dtype=np.float64), -1
    except ValueError:
        for i, c in enumerate(cleaned):
            try:
                float(c)
            except ValueError:
                return None, i
        raise  # unreachable: some cell failed above


def _raw_column(cells: list[str]) -> np.ndarray:
    """A label or device column: numbers if every present cell is one, else stripped strings
    ('' for missing)."""
    values, _ = _numeric(cells)
    if values is not None:
        return values
    return np.array(["" if c.strip().lower() in MISSING else c.strip() for c in cells], dtype=str)


def _split_columns(path: Path, header: list[str], label_column: str,
                   device_column: str | None, exclude_device: str) -> tuple[list[str], list[str]]:
    """(feature columns, problems) from a header."""
    problems = []
    seen = set()
    for name in header:
        if name in seen:
            problems.append(f"{path}: column {name!r}: appears twice in the header")
        seen.add(name)
    for column, role, key in ((label_column, "label", "label_column"),
                              (device_column, "device", "device_column")):
        if column is not None and column not in header:
            problems.append(f"{path}: column {column!r}: missing (the {role} column; columns are "
                            f"{', '.join(header[:12])}{', ...' if len(header) > 12 else ''}; "
                            f"set dataset.{key} to rename it)")
    features = [h for h in header if h not in (label_column, exclude_device)]
    if not features:
        problems.append(f"{path}: no feature columns (every column but {label_column!r} and "
                        f"{exclude_device!r} is a feature)")
    return features, problems


def _read_csv(path: Path, label_column: str, device_column: str | None) -> RawTable:
    exclude = device_column if device_column is not None else "device"
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = [h.strip() for h in next(reader, [])]
            rows, lines, problems = [], [], []
            for row in reader:
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != len(header):
                    problems.append(f"{path}: line {reader.line_num}: {len(row)} fields, the header "
                                    f"has {len(header)}")
                    continue
                rows.append(row)
                lines.append(reader.line_num)
    except UnicodeDecodeError as exc:
        raise DataError([f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    except (OSError, csv.Error) as exc:
        raise DataError([f"{path}: cannot read CSV: {exc}"]) from None
    if not header:
        raise DataError([f"{path}: empty file (expected a header row naming the columns)"])
    features, header_problems = _split_columns(path, header, label_column, device_column, exclude)
    problems = header_problems + problems
    if not rows and not problems:
        problems.append(f"{path}: no data rows below the header")
    if problems:
        raise DataError(problems)
    columns = {name: [r[i] for r in rows] for i, name in enumerate(header)}
    refs = np.asarray(lines)
    x = np.empty((len(rows), len(features)), dtype=np.float64)
    for j, name in enumerate(features):
        values, bad = _numeric(columns[name])
        if values is None:
            problems.append(f"{path}: column {name!r}: {columns[name][bad].strip()!r} is not a number "
                            f"(line {refs[bad]}); every column but {label_column!r} and {exclude!r} "
                            f"must be numeric")
            continue
        problems += _infinite(path, name, values, lambda i: f"line {refs[i]}")
        x[:, j] = values
    owners = _raw_column(columns[device_column]) if device_column is not None else None
    return RawTable(path, x, features, _raw_column(columns[label_column]), owners, "line", refs,
                    problems)


def _infinite(path: Path, name: str, values: np.ndarray, where) -> list[str]:
    bad = np.flatnonzero(np.isinf(values))
    return [f"{path}: column {name!r}: infinite value ({where(int(bad[0]))})"] if len(bad) else []


def _read_parquet(path: Path, label_column: str, device_column: str | None) -> RawTable:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError([f"{path}: reading Parquet needs pyarrow: pip install 'p2pfed[parquet]' "
                         f"(or save the table as CSV)"]) from None
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise DataError([f"{path}: cannot read Parquet: {exc}"]) from None
    exclude = device_column if device_column is not None else "device"
    features, problems = _split_columns(path, table.column_names, label_column, device_column, exclude)
    if problems:
        raise DataError(problems)

    def column(name: str, numeric_only: bool) -> np.ndarray | None:
        col = table.column(name)
        kind = col.type
        if pa.types.is_dictionary(kind):
            col, kind = col.cast(kind.value_type), kind.value_type
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
            return col.cast(pa.float64()).to_numpy(zero_copy_only=False)
        if not numeric_only and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            return np.array(["" if v is None else v.strip() for v in col.to_pylist()], dtype=str)
        problems.append(f"{path}: column {name!r}: type {kind} is not "
                        f"{'numeric' if numeric_only else 'a number or a string'}")
        return None

    x = np.empty((table.num_rows, len(features)), dtype=np.float64)
    for j, name in enumerate(features):
        values = column(name, numeric_only=True)
        if values is not None:
            problems += _infinite(path, name, values, lambda i: f"row {i}")
            x[:, j] = values
    labels = column(label_column, numeric_only=False)
    owners = column(device_column, numeric_only=False) if device_column is not None else None
    if labels is None or (device_column is not None and owners is None):
        raise DataError(problems)
    return RawTable(path, x, list(features), labels, owners, "row", problems=problems)


def read_npz(path: Path, label_column: str, device_column: str | None) -> RawTable:
    """Arrays ``x`` (samples x features), the label array (``label_column``) and, when asked,
    the device array (``device_column``); loaded without pickle."""
    wanted = ["x", label_column] + ([device_column] if device_column is not None else [])
    if not zipfile.is_zipfile(path):
        raise DataError([f"{path}: not an .npz file (an .npz is a zip archive of .npy arrays)"])
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [k for k in wanted if k not in archive.files]
            if missing:
                raise DataError([f"{path}: array {k!r}: missing (arrays: {', '.join(archive.files)}; "
                                 f"features go in 'x', set dataset.label_column / "
                                 f"dataset.device_column to name the others)" for k in missing])
            arrays = {k: archive[k] for k in wanted}
    except DataError:
        raise
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise DataError([f"{path}: holds object arrays, which are refused (they need pickle); "
                             f"save strings as a fixed-width unicode array"]) from None
        raise DataError([f"{path}: not a readable .npz archive: {exc}"]) from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError([f"{path}: not a readable .npz archive: {exc}"]) from None
    x = arrays["x"]
    problems = []
    if x.ndim != 2 or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
        problems.append(f"{path}: array 'x': must be a 2-D numeric array (samples x features), "
                        f"got shape {x.shape} dtype {x.dtype}")
    raw = {}
    for key in wanted[1:]:
        a = arrays[key]
        if a.ndim != 1 or len(a) != len(x):
            problems.append(f"{path}: array {key!r}: must be 1-D with one entry per row of 'x' "
                            f"({len(x)}), got shape {a.shape}")
        elif np.issubdtype(a.dtype, np.number) or a.dtype == bool:
            raw[key] = a.astype(np.float64)
        elif a.dtype.kind == "U":
            raw[key] = np.char.strip(a)
        else:
            problems.append(f"{path}: array {key!r}: dtype {a.dtype} is neither numbers nor strings")
    if problems:
        raise DataError(problems)
    x = x.astype(np.float64)
    bad = np.argwhere(np.isinf(x))
    if len(bad):
        problems.append(f"{path}: array 'x': infinite value at index {tuple(int(i) for i in bad[0])}")
    return RawTable(path, x, [f"x[{j}]" for j in range(x.shape[1])], raw[label_column],
                    raw.get(device_column) if device_column is not None else None, "index",
                    problems=problems)
