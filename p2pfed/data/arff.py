"""Minimal ARFF reader for numeric and nominal attributes.

Hand-written (not scipy.io.arff) so that every skipped data line can be
reported with its line number instead of aborting the whole file.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from p2pfed.textfile import not_text

_ATTR = re.compile(r"""^@attribute\s+("[^"]*"|'[^']*'|\S+)\s*(.*)$""", re.IGNORECASE)


class ArffFormatError(ValueError):
    """Raised when the ARFF header itself cannot be understood."""


@dataclass
class ArffTable:
    """Parsed ARFF content: one column per attribute."""

    relation: str
    names: list[str]
    nominal: dict[str, list[str]]  # attribute name -> declared values (nominal only)
    columns: dict[str, np.ndarray]  # float64 (NaN = '?') or unicode for nominal
    line_numbers: np.ndarray  # 1-based source line of each kept row
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)

    def __len__(self) -> int:
        return len(self.line_numbers)


def _unquote(token: str) -> str:
    token = token.strip()
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "\"'":
        return token[1:-1]
    return token


def _parse_attribute(line: str, path: Path, lineno: int) -> tuple[str, list[str] | None]:
    match = _ATTR.match(line)
    if not match:
        raise ArffFormatError(f"{path}:{lineno}: cannot parse attribute declaration {line!r}")
    name, spec = _unquote(match.group(1)), match.group(2).strip()
    if name.endswith("{"):  # e.g. `@attribute class{ "a", "b" }` without a space
        name, spec = _unquote(name[:-1]), "{" + spec
    if spec.startswith("{"):
        if not spec.endswith("}"):
            raise ArffFormatError(f"{path}:{lineno}: unterminated nominal list for {name!r}")
        return name, [_unquote(v) for v in spec[1:-1].split(",")]
    if spec.split()[0].lower() in {"numeric", "real", "integer"}:
        return name, None
    raise ArffFormatError(f"{path}:{lineno}: unsupported type {spec!r} for attribute {name!r}")


def _parse_row(fields: list[str], kinds: list[list[str] | None], names: list[str]) -> list:
    """Convert one data row; raise ValueError with the reason if it is malformed."""
    if len(fields) != len(kinds):
        raise ValueError(f"expected {len(kinds)} fields, found {len(fields)}")
    row: list = []
    for raw, kind, name in zip(fields, kinds, names):
        value = _unquote(raw)
        if kind is None:
            if value == "?":
                row.append(np.nan)
                continue
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"field {name!r}: {value!r} is not numeric") from None
            if not math.isfinite(number):
                raise ValueError(f"field {name!r}: {value!r} is not finite ('?' marks a missing value)")
            row.append(number)
        else:
            if value not in kind:
                raise ValueError(f"field {name!r}: {value!r} is not one of the declared values")
            row.append(value)
    return row


@dataclass
class _Reader:
    """What an ARFF file's lines declare (header) and hold (data rows), fed one line at a time."""

    path: Path
    relation: str = ""
    names: list[str] = field(default_factory=list)
    kinds: list[list[str] | None] = field(default_factory=list)
    rows: list[list] = field(default_factory=list)
    line_numbers: list[int] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    in_data: bool = False

    def feed(self, lineno: int, text: str) -> None:
        """Take one stripped line: a comment, a header declaration or a data row."""
        if text.startswith("%"):
            return
        if not self.in_data:
            self._header(lineno, text)
        elif not text:
            self.skipped.append((lineno, "empty line"))
        else:
            try:
                self.rows.append(_parse_row(text.split(","), self.kinds, self.names))
                self.line_numbers.append(lineno)
            except ValueError as err:
                self.skipped.append((lineno, str(err)))

    def _header(self, lineno: int, text: str) -> None:
        lower = text.lower()
        if not text:
            return
        if lower.startswith("@relation"):
            self.relation = _unquote(text[len("@relation"):])
        elif lower.startswith("@attribute"):
            name, kind = _parse_attribute(text, self.path, lineno)
            self.names.append(name)
            self.kinds.append(kind)
        elif lower.startswith("@data"):
            self.in_data = True
        else:
            raise ArffFormatError(f"{self.path}:{lineno}: unexpected header line {text!r}")

    def table(self) -> ArffTable:
        """The parsed table; trailing blank lines at the end of a file are harmless, not reported."""
        if not self.in_data:
            raise ArffFormatError(f"{self.path}: no @data section")
        skipped = self.skipped
        while skipped and skipped[-1][1] == "empty line" and skipped[-1][0] > max(self.line_numbers, default=0):
            skipped.pop()
        columns: dict[str, np.ndarray] = {}
        for j, (name, kind) in enumerate(zip(self.names, self.kinds)):
            values = [r[j] for r in self.rows]
            columns[name] = np.array(values, dtype=np.float64 if kind is None else str)
        nominal = {n: k for n, k in zip(self.names, self.kinds) if k is not None}
        return ArffTable(self.relation, self.names, nominal, columns,
                         np.array(self.line_numbers, dtype=np.int64), skipped)


def read_arff(path: str | Path, *, warn: bool = True) -> ArffTable:
    """Read an ARFF file; malformed or empty data lines are skipped and reported.

    Missing numeric values ('?') become NaN. Skipped lines are listed in
    `ArffTable.skipped` and, when `warn` is true, in one `UserWarning`.
    """
    path = Path(path)
    reader = _Reader(path)
    try:
        handle = path.open("r", encoding="utf-8", newline=None)
    except OSError as exc:
        raise ArffFormatError(f"{path}: cannot read ARFF file: {exc.strerror}") from None
    try:
        for lineno, line in enumerate(handle, start=1):
            reader.feed(lineno, line.strip())
    except UnicodeDecodeError:
        raise ArffFormatError(not_text(path, "ARFF file")) from None
    finally:
        handle.close()
    table = reader.table()
    skipped = table.skipped
    if skipped and warn:
        shown = "; ".join(f"line {n}: {why}" for n, why in skipped[:20])
        more = f" (and {len(skipped) - 20} more)" if len(skipped) > 20 else ""
        warnings.warn(f"{path}: skipped {len(skipped)} data line(s): {shown}{more}", stacklevel=2)
    return table
