"""Reference pages generated from the code: ``docs/reference/scenario.md`` from the schema and
the methods' options, ``docs/reference/cli.md`` from the command line's parser.

``python -m p2pfed.docs_gen`` rewrites both; ``--check`` only says which differ (a test runs the
same comparison, so a page never drifts from the code it documents).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

REGENERATE = "python -m p2pfed.docs_gen"


def _scenario() -> str:
    from p2pfed.docs_gen.scenario_page import render
    return render()


def _cli() -> str:
    from p2pfed.docs_gen.cli_page import render
    return render()


PAGES: dict[str, Callable[[], str]] = {
    "docs/reference/scenario.md": _scenario,
    "docs/reference/cli.md": _cli,
}


def generated() -> dict[str, str]:
    """Each page's path (relative to the repository root) and the text the code generates for it."""
    return {path: render() for path, render in PAGES.items()}


def stale(root: Path) -> list[str]:
    """The pages under ``root`` that are missing or differ from what the code generates."""
    return [path for path, text in generated().items()
            if not (root / path).is_file() or (root / path).read_text(encoding="utf-8") != text]


def write(root: Path) -> list[str]:
    """Rewrite every page under ``root``; the paths that changed."""
    changed = stale(root)
    for path, text in generated().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return changed
