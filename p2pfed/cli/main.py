"""The ``p2pfed`` command line: run, compare and validate scenarios; run real peers."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from p2pfed.scenario.loader import LoadedScenario, ScenarioError, load_scenario
from p2pfed.sweep.cli import add_commands as add_sweep_commands

EXIT_BAD_INPUT = 2


def _scenario_args(p: argparse.ArgumentParser, optional: bool) -> None:
    p.add_argument("scenario", nargs="?" if optional else None,
                   help="scenario YAML file" + (" (default: the embedded quickstart)" if optional else ""))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.SUB=VALUE",
                   help="override a scenario field (repeatable), e.g. --set rounds=5")
    p.add_argument("--seed", type=int, help="override the scenario's seed")


def _load(args: argparse.Namespace) -> LoadedScenario:
    return load_scenario(args.scenario, args.overrides, args.seed)


def _length(sc) -> str:
    """How long a run is: rounds, or simulated time over contacts."""
    if sc.contacts.kind == "none":
        return f"{sc.rounds} rounds"
    duration = f"{sc.contacts.duration_s:g} s" if sc.contacts.duration_s else "the trace's span"
    return f"{sc.contacts.kind} contacts for {duration}"


def cmd_run(args: argparse.Namespace) -> int:
    from p2pfed.engine.runner import run_scenario
    from p2pfed.results.compare import COMPARISON_COLUMNS, comparison_row, format_table

    loaded = _load(args)
    if args.algorithm:
        loaded = loaded.with_algorithm(args.algorithm)
    sc = loaded.scenario
    out = Path(args.out) if args.out else Path("runs") / f"{sc.name}-{sc.algorithm.name}"
    print(f"running {loaded.source}: {sc.algorithm.name}, {_length(sc)}, seed {sc.seed}",
          file=sys.stderr)
    summary = run_scenario(loaded, out, progress=not args.quiet)
    print(format_table([comparison_row(summary)], COMPARISON_COLUMNS))
    print(f"results in {out}/ (rounds.csv, devices.csv, summary.json, plot.png)")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from p2pfed.engine.runner import run_scenario
    from p2pfed.results.compare import write_comparison

    loaded = _load(args)
    names = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    runs = [loaded.with_algorithm(n) for n in names]  # fails early on an unknown name
    out = Path(args.out) if args.out else Path("runs") / f"{loaded.scenario.name}-compare"
    summaries, rounds = [], {}
    for name, run in zip(names, runs):
        print(f"[{name}] {_length(run.scenario)}", file=sys.stderr)
        summaries.append(run_scenario(run, out / name, progress=not args.quiet))
        from p2pfed.results.files import read_csv
        rounds[name] = read_csv(out / name / "rounds.csv")
    print(write_comparison(out, summaries, rounds, title=loaded.scenario.name))
    print(f"results in {out}/ (comparison.csv, comparison.png, one folder per algorithm)")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    bad = 0
    for path in args.scenarios:
        try:
            load_scenario(path, args.overrides)
            print(f"{path}: ok")
        except ScenarioError as exc:
            bad += 1
            for line in exc.problems:
                print(line)
    return EXIT_BAD_INPUT if bad else 0


def cmd_peer(args: argparse.Namespace) -> int:
    from p2pfed.peer.runtime import run_peer

    summary = run_peer(args.config, insecure=args.insecure)
    print(f"peer done: f1_macro {summary['final']['f1_macro_mean']}, "
          f"{summary['comm']['bytes_sent_total']} bytes sent, {summary['comm']['messages_dropped']} dropped")
    return 0


def cmd_launch(args: argparse.Namespace) -> int:
    from p2pfed.peer.launcher import launch
    from p2pfed.peer.runtime import insecure_warning
    from p2pfed.results.compare import COMPARISON_COLUMNS, comparison_row, format_table

    loaded = _load(args)
    sc = loaded.scenario
    out = Path(args.out) if args.out else Path("runs") / f"{sc.name}-{sc.algorithm.name}-peers"
    if args.insecure:
        insecure_warning("every launched peer")
    print(f"launching {loaded.source}: {sc.algorithm.name}, {sc.rounds} rounds, peers on 127.0.0.1, "
          f"{'PLAINTEXT' if args.insecure else 'CURVE'}", file=sys.stderr)
    try:
        summary = launch(loaded, Path(args.scenario) if args.scenario else None, args.overrides, args.seed,
                         out, args.peers, insecure=args.insecure, timeout_s=args.timeout,
                         start_timeout_s=args.start_timeout, round_timeout_s=args.round_timeout,
                         verbose=args.verbose)
    except RuntimeError as exc:
        print(f"p2pfed: launch failed: {exc}", file=sys.stderr)
        return 1
    print(format_table([comparison_row(summary)], COMPARISON_COLUMNS))
    print(f"results in {out}/ (rounds.csv, devices.csv, summary.json, plot.png; peers/ per peer)")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from p2pfed.peer.keys import make_keys

    names = [f"peer-{i}" for i in range(args.peers)]
    for public, secret in make_keys(Path(args.out), names):
        print(f"{public}  (share)   {secret}  (keep private)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="p2pfed", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log warnings and details")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="simulate one scenario and write its results")
    _scenario_args(p, optional=True)
    p.add_argument("--out", help="results folder (default runs/<scenario>-<algorithm>)")
    p.add_argument("--algorithm", help="run this method instead of the scenario's")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("compare", help="run several methods on one scenario and tabulate them")
    _scenario_args(p, optional=True)
    p.add_argument("--algorithms", required=True, help="comma-separated, e.g. fedsub,gossip-avg,local")
    p.add_argument("--out", help="results folder (default runs/<scenario>-compare)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("validate", help="check scenario files without running them")
    p.add_argument("scenarios", nargs="+", help="scenario YAML files")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.SUB=VALUE")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("peer", help="run one device as a real peer process (tcp ZeroMQ, CURVE)")
    p.add_argument("--config", required=True, help="peer YAML file (see scenarios/REFERENCE.md)")
    p.add_argument("--insecure", action="store_true", help="plaintext, no authentication (loud warning)")
    p.set_defaults(func=cmd_peer)

    p = sub.add_parser("launch", help="run a scenario as N real peer processes on 127.0.0.1")
    _scenario_args(p, optional=True)
    p.add_argument("--peers", type=int, help="number of peers (must equal the scenario's devices)")
    p.add_argument("--out", help="results folder (default runs/<scenario>-<algorithm>-peers)")
    p.add_argument("--insecure", action="store_true", help="plaintext, no authentication (loud warning)")
    p.add_argument("--start-timeout", type=float, default=120.0,
                   help="seconds a peer waits for its neighbours to start (round 0)")
    p.add_argument("--round-timeout", type=float, default=30.0, help="seconds a peer waits for neighbours")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds before unfinished peers are killed")
    p.set_defaults(func=cmd_launch)

    p = sub.add_parser("keys", help="make CURVE key pairs peer-0..peer-(N-1) for real peers")
    p.add_argument("--out", required=True, help="folder for NAME.key (public) and NAME.key_secret")
    p.add_argument("--peers", type=int, default=1, help="how many key pairs")
    p.set_defaults(func=cmd_keys)

    add_sweep_commands(sub)  # sweep, report
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_level = logging.WARNING if args.command == "peer" else logging.ERROR  # a peer logs its drops
    logging.basicConfig(level=logging.INFO if args.verbose else quiet_level,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except ScenarioError as exc:
        for line in exc.problems:
            print(line, file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValueError as exc:  # unknown algorithm names, impossible topologies, bad data files
        print(f"p2pfed: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
