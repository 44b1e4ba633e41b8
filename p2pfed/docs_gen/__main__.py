"""``python -m p2pfed.docs_gen [--check] [--root DIR]``: rewrite the generated reference pages."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from p2pfed.docs_gen import PAGES, stale, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m p2pfed.docs_gen", description=__doc__)
    parser.add_argument("--root", default=".", help="the repository root (default: the current folder)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if args.check:
        old = stale(root)
        for path in old:
            print(f"{path}: out of date; run python -m p2pfed.docs_gen", file=sys.stderr)
        return 1 if old else 0
    changed = write(root)
    print(f"wrote {len(PAGES)} pages ({', '.join(changed) or 'none changed'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
