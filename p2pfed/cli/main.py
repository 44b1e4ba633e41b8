"""The ``p2pfed`` command line: run, compare and validate scenarios; run real peers.

Bad input of any kind (a scenario, a file it names, an option's value, an output folder that
cannot be written) is refused before any work, one line per problem, exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path

from p2pfed.scenario.loader import launch_problems, load_scenario, with_algorithm
from p2pfed.scenario.spec import RunSpec
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.swap import LOG as SWAP_LOG
from p2pfed.sweeps.cli import add_commands as add_sweep_commands

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130   # 128 + SIGINT, as a shell reports Ctrl-C


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (naming the option) instead of the usage text."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _number(kind: type, minimum: float, inclusive: bool):
    """An argparse type: a finite ``kind`` above ``minimum`` (or equal when ``inclusive``)."""
    bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number {bound}, got {text!r}") from None
        if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
            raise argparse.ArgumentTypeError(f"must be a finite number {bound}, got {text!r}")
        return value
    parse.__name__ = kind.__name__
    return parse


POSITIVE_INT, POSITIVE_SECONDS = _number(int, 1, True), _number(float, 0, False)
NONNEGATIVE_SECONDS = _number(float, 0, True)


def PROBABILITY(text: str) -> float:
    """An argparse type: a probability in [0, 1)."""
    value = NONNEGATIVE_SECONDS(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be a probability in [0, 1), got {text!r}")
    return value


def _scenario_args(p: argparse.ArgumentParser, optional: bool) -> None:
    p.add_argument("scenario", nargs="?" if optional else None,
                   help="scenario YAML file" + (" (default: the embedded quickstart)" if optional else ""))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.SUB=VALUE",
                   help="override a scenario field (repeatable), e.g. --set rounds=5")
    p.add_argument("--seed", type=int, help="override the scenario's seed")


def _overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` overrides, with ``--algorithm X`` last as ``algorithm.name=X`` (the same swap)."""
    extra = [f"algorithm.name={args.algorithm}"] if getattr(args, "algorithm", None) else []
    return [*args.overrides, *extra]


def _load(args: argparse.Namespace) -> RunSpec:
    """The scenario, validated, with its files read and its memory estimated: before any work."""
    from p2pfed.engine.preflight import preflight

    loaded = load_scenario(args.scenario, _overrides(args), args.seed)
    if loaded.swapped is not None:
        loaded.swapped.log()
    preflight(loaded)
    return loaded


def _check_outputs(*folders: Path) -> None:
    from p2pfed.results.files import output_dir_problem

    problems = [f"--out {p}" for p in map(output_dir_problem, folders) if p]
    if problems:
        raise ScenarioError(problems)


def _length(sc) -> str:
    """How long a run is: rounds, or simulated time over contacts."""
    if sc.contacts.kind == "none":
        return f"{sc.rounds} rounds"
    duration = f"{sc.contacts.duration_s:g} s" if sc.contacts.duration_s else "the trace's span"
    return f"{sc.contacts.kind} contacts for {duration}"


def _callbacks(args: argparse.Namespace) -> list:
    """``--log KIND:DIR`` as live-logging callbacks."""
    from p2pfed.results.callbacks import parse_log

    return [parse_log(spec) for spec in getattr(args, "log", None) or []]


def cmd_run(args: argparse.Namespace) -> int:
    from p2pfed.engine.runner import simulate, write_results
    from p2pfed.results.files import folder_label
    from p2pfed.results.compare import comparison_columns, comparison_row, format_table

    loaded = _load(args)
    sc = loaded.scenario
    out = Path(args.out) if args.out else Path("runs") / f"{sc.name}-{folder_label(sc.algorithm.name)}"
    _check_outputs(out)
    checkpointing = None
    if args.checkpoint_every or args.resume:
        from p2pfed.engine.runner import Checkpointing
        path = out / "checkpoint.pt"
        if path.exists() and not args.resume:
            raise ScenarioError([f"{path}: a checkpoint of an earlier run is there; --resume continues "
                                 "it, or choose another --out"])
        if args.resume and not path.exists():
            raise ScenarioError([f"{path}: no checkpoint to resume from"])
        out.mkdir(parents=True, exist_ok=True)
        checkpointing = Checkpointing(path, every=args.checkpoint_every or 1)
    print(f"running {loaded.source}: {sc.algorithm.name}, {_length(sc)}, seed {sc.seed}",
          file=sys.stderr)
    done = simulate(loaded, progress=not args.quiet, checkpointing=checkpointing, callbacks=_callbacks(args))
    assert done is not None   # only a checkpointed run told to stop early returns none
    if done.resumed_at_end and checkpointing is not None:
        print(f"{checkpointing.path}: the run had already finished; its results are written again from it",
              file=sys.stderr)
    write_results(done, out, sc.name)
    summary = done.summary
    print(format_table([row := comparison_row(summary)], comparison_columns([row])))
    graph = "contacts.csv, contacts.png" if done.plan is not None else "edges.csv"
    print(f"results in {out}/ (rounds.csv, devices.csv, dataset.json, summary.json, plot.png, {graph};"
          f" `p2pfed report {out}` makes report.html)")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from p2pfed.engine.runner import run_scenario
    from p2pfed.results.compare import write_comparison

    loaded = _load(args)
    runs = _compared(loaded, args.algorithms)
    names = [run.scenario.algorithm.name for run in runs]
    from p2pfed.results.files import folder_label, read_csv

    out = Path(args.out) if args.out else Path("runs") / f"{loaded.scenario.name}-compare"
    _check_outputs(out, *(out / folder_label(n) for n in names))
    summaries, rounds = [], {}
    for name, run in zip(names, runs):
        print(f"[{name}] {_length(run.scenario)}", file=sys.stderr)
        summary = run_scenario(run, out / folder_label(name), progress=not args.quiet,
                               callbacks=_callbacks(args))
        assert summary is not None   # no checkpoints: the run goes to its end
        summaries.append(summary)
        rounds[summary["algorithm"]] = read_csv(out / folder_label(name) / "rounds.csv")   # as the table names it
    print(write_comparison(out, summaries, rounds, title=loaded.scenario.name))
    print(f"results in {out}/ (comparison.csv, comparison.png, one folder per algorithm)")
    return 0


# Datasets whose files ``validate`` reads (cheap, and only a read finds a bad column). WISDM is
# packaged, or a large raw file whose bad lines are skipped with a warning at run time.
DATA_CHECKED_BY_VALIDATE = ("files", "digits")


def _compared(loaded: RunSpec, text: str) -> list[RunSpec]:
    """``--algorithms a,b,c``: the scenario run with each (at least one, each known, none twice),
    each swap said once."""
    names = [a.strip() for a in text.split(",") if a.strip()]
    if not names:
        raise ScenarioError([f"--algorithms {text!r}: give at least one method, e.g. fedsub,gossip-avg,local"])
    problems, runs = [], []
    for name in dict.fromkeys(names):
        try:
            runs.append(with_algorithm(loaded, name))
        except ScenarioError as exc:
            problems += [f"--algorithms: {line.removeprefix(f'{loaded.source}: ').removeprefix('algorithm.name: ')}"
                         for line in exc.problems]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        problems.append(f"--algorithms: {', '.join(twice)} listed twice")
    if problems:
        raise ScenarioError(problems)
    for run in runs:
        if run.swapped is not None:
            run.swapped.log()
    return runs


def cmd_validate(args: argparse.Namespace) -> int:
    from p2pfed.engine.preflight import preflight

    bad = 0
    for path in args.scenarios:
        try:
            loaded = load_scenario(path, args.overrides)
            preflight(loaded)
            if loaded.scenario.dataset.name in DATA_CHECKED_BY_VALIDATE:
                loaded.federation   # reading it finds a bad column or an impossible partition
            if args.launch and (problems := launch_problems(loaded)):
                raise ScenarioError(problems)
            print(f"{path}: ok")
        except ScenarioError as exc:
            bad += 1
            for line in exc.problems:
                print(line)
    return EXIT_BAD_INPUT if bad else 0


def cmd_explain(args: argparse.Namespace) -> int:
    from p2pfed.scenario.fields import UnknownField, explain_text, explained

    try:
        docs = explained(args.field)
    except UnknownField as exc:
        print(f"p2pfed explain: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print("\n\n".join(explain_text(doc) for doc in docs))
    return 0


def cmd_peer(args: argparse.Namespace) -> int:
    from p2pfed.peer.entry import PeerInterrupted, run_peer

    try:
        summary = run_peer(args.config, insecure=args.insecure)
    except PeerInterrupted as exc:
        print(f"p2pfed peer: {exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"peer done: f1_macro {summary['final']['f1_macro_mean']}, "
          f"{summary['comm']['bytes_sent_total']} bytes sent, {summary['comm']['messages_dropped']} dropped")
    return 0


def _timing(args: argparse.Namespace):
    from p2pfed.peer.config import PeerTiming

    if args.shared_grid and not args.round_period:
        raise ScenarioError(["--shared-grid: needs --round-period SECONDS (the grid's step)"])
    return PeerTiming(args.start_timeout, args.round_timeout, args.round_period, args.speedup, args.shared_grid)


def _shared_grid_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shared-grid", action="store_true",
                   help="with --round-period: every peer's round r ends at one shared start + (r + 1) periods, "
                        "and a peer fuses then what arrived, waiting for no one (the simulator's rounds)")


def cmd_launch(args: argparse.Namespace) -> int:
    from p2pfed.peer.launcher import launch
    from p2pfed.peer.runtime import insecure_warning
    from p2pfed.results.files import folder_label
    from p2pfed.results.compare import comparison_columns, comparison_row, format_table

    loaded = _load(args)
    sc = loaded.scenario
    out = Path(args.out) if args.out else Path("runs") / f"{sc.name}-{folder_label(sc.algorithm.name)}-peers"
    _check_outputs(out)
    timing = _timing(args)
    if args.insecure:
        insecure_warning("every launched peer")
    emulated = args.network == "emulated"
    if not emulated and (args.loss or args.jitter or args.faults or args.congestion_control):
        print("p2pfed: launch: --loss, --jitter, --faults and --congestion-control act on emulated links: "
              "add --network emulated",
              file=sys.stderr)
        return 2
    where = "an emulated LAN (one namespace per peer)" if emulated else "127.0.0.1"
    print(f"launching {loaded.source}: {sc.algorithm.name}, {_length(sc)}, peers on {where}, "
          f"{'PLAINTEXT' if args.insecure else 'CURVE'}", file=sys.stderr)
    try:
        if emulated:
            from p2pfed.peer.emulated import launch_emulated
            from p2pfed.peer.faults import load_faults
            faults = load_faults(Path(args.faults), loaded.num_devices) if args.faults else None
            summary = launch_emulated(loaded, out, insecure=args.insecure, loss=args.loss, jitter_s=args.jitter,
                                      faults=faults, faults_source=args.faults or "faults",
                                      timeout_s=args.timeout, timing=timing,
                                      congestion_control=args.congestion_control)
        else:
            summary = launch(loaded, Path(args.scenario) if args.scenario else None, _overrides(args), args.seed,
                             out, args.peers, insecure=args.insecure, timeout_s=args.timeout,
                             timing=timing, verbose=args.verbose)
    except RuntimeError as exc:   # LanError included: one line saying what is needed
        print(f"p2pfed: launch failed: {exc}", file=sys.stderr)
        return 1
    print(format_table([row := comparison_row(summary)], comparison_columns([row])))
    print(f"results in {out}/ (rounds.csv, devices.csv, dataset.json, summary.json, plot.png; peers/ per peer)")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from p2pfed.peer.bundle import read_hosts, write_bundle

    loaded = _load(args)
    if (loaded.scenario.contacts.kind != "none" or args.shared_grid) and args.start_at is None:
        why = "--shared-grid" if args.shared_grid else "contacts"
        print(f"p2pfed: plan: {loaded.source}: {why}: every host must count time from one instant; "
              "give --start-at UNIX_TIME (clocks synchronised, e.g. by NTP)", file=sys.stderr)
        return 2
    if args.start_at is not None and args.start_at <= (now := time.time()):
        raise ScenarioError([f"--start-at {args.start_at:.0f}: passed {now - args.start_at:.0f} s ago; give an "
                             "instant after every host has started its peer and loaded, e.g. "
                             "--start-at $(( $(date +%s) + 120 ))"])
    _check_outputs(Path(args.out))
    endpoints = read_hosts(Path(args.hosts), loaded.num_devices)
    configs = write_bundle(loaded, endpoints, Path(args.out), insecure=args.insecure, timing=_timing(args),
                           start_time=args.start_at, force=args.force)
    print(f"{len(configs)} peer folders in {args.out}/ (peer-I/: peer.yaml, scenario.yaml, keys/, start.sh): "
          f"copy each to its host and run its start.sh; then copy each results/ back and run "
          f"p2pfed merge {args.out}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from p2pfed.peer.merge import merge_bundle
    from p2pfed.results.compare import comparison_columns, comparison_row, format_table

    out = Path(args.out)
    _check_outputs(out)
    summary = merge_bundle(Path(args.bundle), out, partial=args.partial)
    print(format_table([row := comparison_row(summary)], comparison_columns([row])))
    if "partial" in summary:
        print(f"PARTIAL: no results from peers {summary['partial']['missing_peers']}; merged the other "
              f"{len(summary['partial']['merged_peers'])} (summary.json partial says so)", file=sys.stderr)
    print(f"results in {out}/ (rounds.csv, devices.csv, dataset.json, summary.json, plot.png)")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from p2pfed.peer.keys import make_keys

    _check_outputs(Path(args.out))
    names = [f"peer-{i}" for i in range(args.peers)]
    for public, secret in make_keys(Path(args.out), names):
        print(f"{public}  (share)   {secret}  (keep private)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="p2pfed", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log warnings and details")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_simulation_commands(sub)   # run, compare, validate, explain
    _add_peer_commands(sub)         # peer, launch
    _add_host_commands(sub)         # plan, merge, keys
    add_sweep_commands(sub)  # sweep, report
    return parser


def _add_simulation_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="simulate one scenario and write its results")
    _scenario_args(p, optional=True)
    p.add_argument("--out", help="results folder (default runs/<scenario>-<algorithm>)")
    p.add_argument("--algorithm", help="run this method instead of the scenario's (its options the "
                   "method does not know are left out; same as --set algorithm.name=NAME)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="write OUT/checkpoint.pt every N rounds (over contacts: every N evaluations)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    p.add_argument("--log", action="append", metavar="KIND:DIR",
                   help="log each evaluation live, e.g. tensorboard:runs/tb (repeatable)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("compare", help="run several methods on one scenario and tabulate them")
    _scenario_args(p, optional=True)
    p.add_argument("--algorithms", required=True, help="comma-separated, e.g. fedsub,gossip-avg,local")
    p.add_argument("--out", help="results folder (default runs/<scenario>-compare)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--log", action="append", metavar="KIND:DIR",
                   help="log each evaluation live, e.g. tensorboard:runs/tb (repeatable)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("validate", help="check scenario files without running them")
    p.add_argument("scenarios", nargs="+", help="scenario YAML files")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.SUB=VALUE",
                   help="override a scenario field of every file (repeatable)")
    p.add_argument("--launch", action="store_true", help="also check what real peers (launch) need")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("explain", help="print a scenario field's type, allowed values, default and description")
    p.add_argument("field", metavar="FIELD",
                   help="a dotted scenario key, e.g. contacts.protocol; a section (contacts) lists its fields; a "
                        "method's option is algorithm.METHOD.OPTION, e.g. algorithm.fedsub.extraction "
                        "(algorithm.OPTION: that option of every method that has it)")
    p.set_defaults(func=cmd_explain)


def _add_peer_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("peer", help="run one device as a real peer process (tcp ZeroMQ, CURVE)")
    p.add_argument("--config", required=True, help="peer YAML file (see docs/reference/scenario.md)")
    p.add_argument("--insecure", action="store_true", help="plaintext, no authentication (loud warning)")
    p.add_argument("-v", dest="verbose", action="store_true", default=argparse.SUPPRESS,
                   help="log a line per round (as p2pfed -v peer)")
    p.set_defaults(func=cmd_peer)

    p = sub.add_parser("launch", help="run a scenario as N real peer processes on 127.0.0.1")
    _scenario_args(p, optional=True)
    p.add_argument("--peers", type=POSITIVE_INT, help="number of peers (must equal the scenario's devices)")
    p.add_argument("--out", help="results folder (default runs/<scenario>-<algorithm>-peers)")
    p.add_argument("--algorithm", help="run this method instead of the scenario's (as in run)")
    p.add_argument("--insecure", action="store_true", help="plaintext, no authentication (loud warning)")
    _pacing_args(p)
    p.add_argument("--timeout", type=POSITIVE_SECONDS, default=3600.0,
                   help="seconds before unfinished peers are killed")
    _shared_grid_arg(p)
    _speedup_arg(p)
    p.add_argument("--network", choices=["loopback", "emulated"], default="loopback",
                   help="loopback: every peer on 127.0.0.1 (default); emulated: every peer its own host in a "
                        "network namespace, the topology's links with their latency and bandwidth, or over "
                        "contacts links up only during contacts (needs root)")
    p.add_argument("--loss", type=PROBABILITY, default=0.0, help="emulated: each packet lost with this probability")
    p.add_argument("--jitter", type=NONNEGATIVE_SECONDS, default=0.0, metavar="SECONDS",
                   help="emulated: each packet's latency varies uniformly by up to this much (order kept)")
    p.add_argument("--faults", metavar="FILE", help="emulated: a YAML file of slow links, partitions, killed "
                   "peers (by round) and skewed clocks (see docs/reference/scenario.md)")
    p.add_argument("--congestion-control", metavar="NAME",
                   help="emulated: the hosts' TCP congestion control, e.g. reno (default: the kernel's, which "
                        "namespaces inherit; Reno and CUBIC restart slow start after idle: topology.slow_start)")
    p.set_defaults(func=cmd_launch)


def _add_host_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="write one folder per peer (peer file, scenario, keys, start.sh) for real hosts")
    _scenario_args(p, optional=True)
    p.add_argument("--hosts", required=True, help="YAML file: hosts: [address or address:port per device]")
    p.add_argument("--out", required=True, help="bundle folder: peer-I/ per device and plan.json")
    p.add_argument("--algorithm", help="run this method instead of the scenario's (as in run)")
    p.add_argument("--insecure", action="store_true", help="no keys: peers run plaintext (loud warning)")
    _pacing_args(p)
    _speedup_arg(p)
    _shared_grid_arg(p)
    p.add_argument("--start-at", type=POSITIVE_SECONDS, metavar="UNIX_TIME",
                   help="over contacts or with --shared-grid: the unix time of (simulated) time 0 on every host "
                        "(clocks synchronised, e.g. by NTP; default: each peer's own start)")
    p.add_argument("--force", action="store_true",
                   help="replace a bundle already in --out: new keys and run id, its peer folders (results "
                        "included) removed")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("merge", help="merge a planned run's peer results (BUNDLE/peer-I/results/) into one run")
    p.add_argument("bundle", help="the folder p2pfed plan wrote, each peer's results/ copied back")
    p.add_argument("--out", required=True, help="results folder")
    p.add_argument("--partial", action="store_true",
                   help="merge the peers whose results came back, the missing named in summary.json partial "
                        "(default: refuse while any is missing)")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("keys", help="make CURVE key pairs peer-0..peer-(N-1) for real peers")
    p.add_argument("--out", required=True, help="folder for NAME.key (public) and NAME.key_secret")
    p.add_argument("--peers", type=POSITIVE_INT, default=1, help="how many key pairs")
    p.set_defaults(func=cmd_keys)


def _pacing_args(p: argparse.ArgumentParser) -> None:
    """A real peer's waits and round pacing (launch, plan)."""
    p.add_argument("--start-timeout", type=POSITIVE_SECONDS, default=120.0,
                   help="seconds a peer waits for its neighbours to start (round 0)")
    p.add_argument("--round-timeout", type=POSITIVE_SECONDS, default=30.0, help="seconds a peer waits for neighbours")
    p.add_argument("--round-period", type=NONNEGATIVE_SECONDS, default=0.0, metavar="SECONDS",
                   help="a round lasts at least this long on the wall clock (default 0: no pacing)")


def _speedup_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--speedup", type=POSITIVE_SECONDS, default=1.0, metavar="X",
                   help="over contacts: simulated seconds per wall-clock second (links X times faster, "
                        "latencies X times shorter)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_level = logging.WARNING if args.command == "peer" else logging.ERROR  # a peer logs its drops
    logging.basicConfig(level=logging.INFO if args.verbose else quiet_level,
                        format="%(levelname)s %(name)s: %(message)s")
    SWAP_LOG.setLevel(logging.WARNING)   # a method swapped in says what it left out
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"p2pfed {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ScenarioError as exc:
        for line in exc.problems:
            print(line, file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValueError as exc:  # unknown algorithm names, impossible topologies, bad data files
        print(f"p2pfed: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # the machine, not the input: a disk that filled up, a folder made read-only
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"p2pfed: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
