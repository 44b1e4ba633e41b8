"""Markdown pieces the generated pages are made of: code spans, table cells, tables."""

from __future__ import annotations

import re
from collections.abc import Sequence


def code(text: str) -> str:
    """``text`` as a code span (a longer fence when it holds a backtick)."""
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def cell(text: str) -> str:
    """``text`` safe inside a table cell: one line, pipes escaped, a ``<`` that could open an
    HTML tag outside code spans written as an entity, empty shown as a dash."""
    flat = " ".join(text.split()).replace("|", "\\|")
    pieces = re.split(r"(`+[^`]*`+)", flat)
    flat = "".join(p if p.startswith("`") else re.sub(r"<(?=[A-Za-z/!?])", "&lt;", p) for p in pieces)
    return flat or "—"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; every cell is passed through :func:`cell`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph on one line."""
    return " ".join((doc or "").strip().split("\n\n", 1)[0].split())
