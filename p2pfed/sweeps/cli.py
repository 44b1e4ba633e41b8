"""``p2pfed sweep`` and ``p2pfed report``: the subcommands, added to the main parser by ``add_commands``.

Heavy imports (Dask, torch, matplotlib) happen inside the commands, so other subcommands do not
pay for them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run methods × swept values × seeds, on local cores or a Dask cluster")
    p.add_argument("sweep_file", metavar="SWEEP.yaml", help="sweep file (see docs/reference/scenario.md)")
    p.add_argument("--out", help="results folder (default runs/<sweep name>); a folder that already holds a sweep "
                   "is refused without --resume")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, help="worker processes of the local Dask cluster, one thread each "
                       "(default: one per core); --workers 1 runs the cells one after the other, with the same numbers")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="run on an existing Dask scheduler instead, e.g. tcp://head:8786; its workers need the "
                            "same p2pfed and must see --out and the scenario's files at the same paths")
    p.add_argument("--resume", action="store_true",
                   help="keep the finished cells in --out and run only the missing ones (failed ones again)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.SUB=VALUE",
                   help="fix a scenario field for every cell (repeatable), as in run, e.g. --set rounds=5")
    p.add_argument("--seeds", type=_seed_list, metavar="S1,S2,...",
                   help="run these seeds instead of the file's, e.g. --seeds 0,1")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("report", help="write report.html (one page to open offline) for a run or a sweep folder;"
                                      " for a sweep, first rebuild sweep.csv, summary.csv and plots from its cells")
    p.add_argument("out", metavar="DIR", help="a run's or a sweep's results folder")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--pack", action="store_true",
                      help="then keep the cells in four files (cells.jsonl, cells-*.csv) instead of a folder each")
    form.add_argument("--unpack", action="store_true", help="first write the archive's cells back into DIR/cells/")
    p.set_defaults(func=cmd_report)


def cmd_sweep(args: argparse.Namespace) -> int:
    from p2pfed.sweeps.run import run_sweep

    return run_sweep(Path(args.sweep_file), Path(args.out) if args.out else None, workers=args.workers,
                     scheduler=args.scheduler, resume=args.resume, progress=not args.quiet,
                     overrides=args.overrides, seeds=args.seeds)


def _seed_list(text: str) -> list[int]:
    """``--seeds 0,1,2``: distinct integers >= 0."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"expected distinct integers >= 0, got {text!r}")
    return seeds


def cmd_report(args: argparse.Namespace) -> int:
    from p2pfed.sweeps.archive import pack, unpack
    from p2pfed.results.report_page import write_page
    from p2pfed.sweeps import store
    from p2pfed.sweeps.report import FILES, build_report

    out = Path(args.out)
    if not store.has_manifest(out) and (out / "summary.json").is_file():
        if args.pack or args.unpack:
            print(f"p2pfed report: {out} is a run folder; --pack and --unpack are for sweeps", file=sys.stderr)
            return 2
        print(f"report in {write_page(out, *_run_page(out))}", file=sys.stderr)
        return 0
    if args.unpack:
        print(f"{unpack(out)} cell folder(s) written back into {out / 'cells'}/", file=sys.stderr)
    print(build_report(out))
    print(f"results in {args.out}/ ({FILES})", file=sys.stderr)
    if args.pack:
        left_out = pack(out)
        dropped = f"; {len(left_out)} file(s) of the cells left out (their plots and graph files)" if left_out else ""
        print(f"cells packed into {out}/ (cells.jsonl, cells-rounds.csv, cells-devices.csv, cells-datasets.jsonl)"
              + dropped, file=sys.stderr)
    return 0


def _run_page(out: Path) -> tuple[str, dict]:
    from p2pfed.results.report_page import run_page_data

    data = run_page_data(out)
    return data["title"], data
