"""p2pfed sweep / report: grids on Dask, same numbers with any number of workers, resume, failures."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from p2pfed.algorithms import ALGORITHMS
from p2pfed.cli.main import main
from p2pfed.sweeps import store
from p2pfed.sweeps.aggregate import mean_ci
from p2pfed.sweeps.cells import expand, resolve
from p2pfed.sweeps.spec import read_sweep

ROOT = Path(__file__).resolve().parents[1]
TINY = {"rounds": 2, "dataset.synthetic.num_devices": 4, "dataset.synthetic.samples_per_class": 15,
        "model.hidden": [8, 16]}


def write_sweep(folder: Path, name: str = "tiny", **fields) -> Path:
    data = {"name": name, "scenario": str(ROOT / "scenarios" / "synthetic-small.yaml"),
            "methods": ["fedsub", "gossip-avg"], "seeds": [1, 2], "set": TINY,
            "grid": {"training.lr": [0.05, 0.1]}, **fields}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def rows(path: Path, drop: tuple[str, ...] = ("wall_time_s",)) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(fh)]


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny sweep (2 methods x 2 learning rates x 2 seeds = 8 cells) run once on a Dask worker."""
    folder = tmp_path_factory.mktemp("sweep")
    sweep = write_sweep(folder)
    out = folder / "out1"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    return sweep, out


@pytest.mark.slow   # in the slow set .ci/run also runs (the default suite's 10 minutes)
def test_one_and_two_workers_give_the_same_numbers(tiny_sweep, tmp_path, capsys):
    sweep, out1 = tiny_sweep
    out2 = tmp_path / "out2"
    assert main(["sweep", str(sweep), "--out", str(out2), "--workers", "2", "--quiet"]) == 0
    one, two = rows(out1 / "sweep.csv"), rows(out2 / "sweep.csv")
    assert len(one) == 8 and all(r["status"] == "done" for r in one)
    assert one == two                                   # every number, cell hash and seed, wall time aside
    assert len({r["f1_macro_mean"] for r in one}) > 1   # and they are not all the same number
    assert (out1 / "summary.csv").read_text() == (out2 / "summary.csv").read_text()
    # each cell folder is exactly what `p2pfed run` writes
    for r in one:
        assert {p.name for p in (out2 / "cells" / r["cell"]).iterdir()} == \
            {"rounds.csv", "devices.csv", "dataset.json", "summary.json", "plot.png", "edges.csv"}
    assert "2 Dask worker(s)" in capsys.readouterr().err  # this one ran on 2 workers


def test_a_cell_equals_p2pfed_run_of_its_scenario(tiny_sweep, tmp_path):
    _, out = tiny_sweep
    first = rows(out / "sweep.csv")[0]
    cell = out / "cells" / first["cell"]
    sets = [f"{k}={json.dumps(v)}" for k, v in TINY.items()] + [f"training.lr={first['training.lr']}"]
    args = ["run", str(ROOT / "scenarios" / "synthetic-small.yaml"), "--algorithm", first["method"],
            "--seed", first["seed"], "--out", str(tmp_path / "run"), "--quiet"]
    assert main(args + sum((["--set", s] for s in sets), [])) == 0
    assert rows(tmp_path / "run" / "rounds.csv") == rows(cell / "rounds.csv")
    assert rows(tmp_path / "run" / "devices.csv") == rows(cell / "devices.csv")
    mine, theirs = (json.loads((d / "summary.json").read_text()) for d in (tmp_path / "run", cell))
    assert mine["config"] == theirs["config"] and mine["final"] == theirs["final"]


def test_summary_has_t_intervals_over_seeds(tiny_sweep):
    _, out = tiny_sweep
    cells = rows(out / "sweep.csv")
    summary = rows(out / "summary.csv")
    assert [(r["method"], r["training.lr"]) for r in summary] == \
        [("fedsub", "0.05"), ("fedsub", "0.1"), ("gossip-avg", "0.05"), ("gossip-avg", "0.1")]
    for s in summary:
        f1 = [float(c["f1_macro_mean"]) for c in cells
              if (c["method"], c["training.lr"]) == (s["method"], s["training.lr"])]
        mean, std, low, high = mean_ci(f1)
        assert s["n"] == "2" and s["failed"] == "0"
        assert float(s["f1_mean"]) == pytest.approx(sum(f1) / 2, abs=1e-6)
        assert float(s["f1_ci_low"]) == pytest.approx(low, abs=1e-6)
        assert low < mean < high
        assert float(s["f1_ci_high"]) == pytest.approx(high, abs=1e-6)
    assert (out / "sweep.png").stat().st_size > 1000 and (out / "f1_curves.png").stat().st_size > 1000


def test_paired_csv_tests_each_pair_of_configurations_with_the_seed_as_unit(tiny_sweep):
    """A claim "A beats B" pairs the same devices under the same seed, and its unit is the run:
    paired.csv holds, for every two configurations, scipy's paired t-test over the per-seed means
    of the cells' own devices.csv, its p-value adjusted over the file's comparisons."""
    from scipy import stats

    _, out = tiny_sweep
    cells = rows(out / "sweep.csv")
    paired = rows(out / "paired.csv")
    # 4 configurations (2 methods x 2 learning rates), every pair once under the headline
    # protocol (after the fusion), then once more scored after the training
    assert [r["protocol"] for r in paired] == ["after-fusion"] * 6 + ["after-training"] * 6
    seeds = sorted({c["seed"] for c in cells})
    for protocol, column in (("after-fusion", "f1_macro"), ("after-training", "f1_after_training")):
        # a pair whose difference varies over the seeds (tiny runs can tie)
        row = next(r for r in paired if r["protocol"] == protocol and r["p_value"] != "")

        def seed_mean(config: str, seed: str, column: str = column) -> float:
            method, lr = config.split(" training.lr=")
            cell = next(c["cell"] for c in cells if (c["method"], c["training.lr"], c["seed"]) == (method, lr, seed))
            f1 = [float(d[column]) for d in rows(out / "cells" / cell / "devices.csv")]
            return sum(f1) / len(f1)

        a = [seed_mean(row["a"], s) for s in seeds]
        b = [seed_mean(row["b"], s) for s in seeds]
        assert (row["unit"], int(row["n"])) == ("seed", len(seeds)) and len(seeds) == 2
        assert float(row["f1_diff"]) == pytest.approx(sum(a) / 2 - sum(b) / 2, abs=1e-6)
        assert float(row["p_value"]) == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-2)
        assert float(row["f1_diff_ci_low"]) < float(row["f1_diff"]) < float(row["f1_diff_ci_high"])
        # each protocol's rows are adjusted among themselves
        tested = [r for r in paired if r["p_value"] != "" and r["protocol"] == protocol]
        assert all(int(r["comparisons"]) == len(tested) and r["adjustment"] == "benjamini-hochberg" for r in tested)
        assert all(float(r["p_adjusted"]) >= float(r["p_value"]) for r in tested)
        assert float(row["bytes_ratio"]) > 0


def test_p_values_are_adjusted_for_the_number_of_comparisons():
    """Benjamini–Hochberg over the rows that have a p-value, as scipy computes it; a row without
    one (no spread) keeps none."""
    from scipy import stats

    from p2pfed.sweeps.paired import adjust

    ps = [0.01, 0.04, 0.03, 0.2]
    rows_ = adjust([{"p_value": p} for p in ps] + [{"p_value": ""}])
    expected = stats.false_discovery_control(ps, method="bh")
    assert [r["p_adjusted"] for r in rows_[:4]] == pytest.approx(expected, rel=1e-2)
    assert rows_[0]["p_adjusted"] == pytest.approx(0.04, rel=1e-2)   # 0.01 x 4 / 1
    assert rows_[4]["p_adjusted"] == "" and all(r["comparisons"] == 4 for r in rows_)


def test_mean_ci_is_students_t_interval():
    mean, std, low, high = mean_ci([1.0, 2.0, 3.0])
    assert (mean, std) == (2.0, 1.0)
    # t(0.975, df=2) = 4.302653; half-width = 4.302653 / sqrt(3)
    assert low == pytest.approx(2 - 2.484138, abs=1e-5) and high == pytest.approx(2 + 2.484138, abs=1e-5)
    assert mean_ci([0.5])[0] == 0.5 and all(x != x for x in mean_ci([0.5])[1:])  # one seed: no spread
    assert mean_ci([0.5, 0.5]) == (0.5, 0.0, 0.5, 0.5)


def test_report_rebuilds_the_same_files(tiny_sweep, tmp_path, capsys):
    _, out = tiny_sweep
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for name in ("sweep.csv", "summary.csv", "sweep.png", "f1_curves.png"):
        (copy / name).unlink()
    capsys.readouterr()
    assert main(["report", str(copy)]) == 0
    assert "fedsub" in capsys.readouterr().out
    assert (copy / "sweep.csv").read_text() == (out / "sweep.csv").read_text()
    assert (copy / "summary.csv").read_text() == (out / "summary.csv").read_text()
    assert main(["report", str(tmp_path)]) == 2  # not a sweep folder


def test_resume_runs_only_the_missing_cells(tiny_sweep, tmp_path, capsys):
    sweep, out = tiny_sweep
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    before = rows(copy / "sweep.csv", drop=())
    gone = [before[1]["cell"], before[6]["cell"]]
    for cell in gone:
        shutil.rmtree(copy / "cells" / cell)
    stamps = {d.name: (d / "summary.json").stat().st_mtime_ns for d in (copy / "cells").iterdir()}
    capsys.readouterr()
    assert main(["sweep", str(sweep), "--out", str(copy), "--quiet"]) == 2  # refused without --resume
    assert "--resume" in capsys.readouterr().err
    assert main(["sweep", str(sweep), "--out", str(copy), "--workers", "1", "--resume", "--quiet"]) == 0
    assert "8 cells, 6 already done, 2 to run" in capsys.readouterr().err
    for name, stamp in stamps.items():   # the finished cells were not run again
        assert (copy / "cells" / name / "summary.json").stat().st_mtime_ns == stamp
    after = rows(copy / "sweep.csv", drop=())
    assert [r["wall_time_s"] for r in after if r["cell"] not in gone] == \
        [r["wall_time_s"] for r in before if r["cell"] not in gone]
    assert rows(copy / "sweep.csv") == rows(out / "sweep.csv")  # the rerun cells give the same numbers


def test_a_packed_sweep_reports_the_same_and_unpacks_to_the_same_files(tiny_sweep, tmp_path, capsys):
    """``report --pack`` keeps the cells in four files; every table the report makes from them
    equals the one made from the cell folders, and ``--unpack`` gives back each packed file."""
    from p2pfed.sweeps.archive import INDEX, TABLES

    _, out = tiny_sweep
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    assert main(["report", str(copy), "--pack"]) == 0
    assert not (copy / "cells").exists() and (copy / INDEX).is_file()
    assert "16 file(s) of the cells left out (their plots and graph files)" in capsys.readouterr().err
    index = [json.loads(line) for line in (copy / INDEX).read_text().splitlines()]
    assert len(index) == 8 and len(rows(copy / TABLES["devices.csv"])) == 8 * 4   # 4 devices per cell
    for name in ("sweep.csv", "summary.csv", "paired.csv"):
        (copy / name).unlink()
    assert main(["report", str(copy)]) == 0
    for name in ("sweep.csv", "summary.csv", "paired.csv"):
        assert (copy / name).read_text() == (out / name).read_text(), name
    assert main(["report", str(copy), "--unpack"]) == 0
    assert not (copy / INDEX).exists()
    for cell in (out / "cells").iterdir():
        for file in ("rounds.csv", "devices.csv", "summary.json", "dataset.json"):
            assert (copy / "cells" / cell.name / file).read_bytes() == (cell / file).read_bytes()


def test_pack_refuses_a_cell_it_could_not_give_back(tiny_sweep, tmp_path, capsys):
    """A cell file the archive would not restore byte for byte (here: edited by hand, JSON in
    another layout) stops the packing: nothing is removed and the file is named."""
    _, out = tiny_sweep
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    edited = next((copy / "cells").iterdir()) / "summary.json"
    edited.write_text(json.dumps(json.loads(edited.read_text())))
    assert main(["report", str(copy), "--pack"]) == 2
    assert f"{edited}: the archive would not give it back unchanged" in capsys.readouterr().err
    assert len(list((copy / "cells").iterdir())) == 8 and not (copy / "cells.jsonl").exists()


@pytest.mark.slow   # a second sweep on a Dask worker; in the slow set .ci/run runs
def test_resume_into_a_packed_sweep_runs_only_the_missing_cells(tiny_sweep, tmp_path, capsys):
    from p2pfed.sweeps.archive import pack

    sweep, out = tiny_sweep
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    gone = rows(copy / "sweep.csv")[3]["cell"]
    shutil.rmtree(copy / "cells" / gone)
    pack(copy)
    capsys.readouterr()
    assert main(["sweep", str(sweep), "--out", str(copy), "--workers", "1", "--resume", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "7 cell(s) of the folder's archive written back" in err and "7 already done, 1 to run" in err
    assert rows(copy / "sweep.csv") == rows(out / "sweep.csv")


@pytest.mark.slow   # a sweep of its own on a Dask worker; in the slow set .ci/run runs
def test_a_failing_cell_is_recorded_and_the_others_complete(tmp_path, capsys):
    # a random 3-regular graph on 5 devices cannot exist: that cell raises when it builds its graph
    sweep = write_sweep(tmp_path, name="failing", methods=["gossip-avg"], seeds=[1],
                        set={**TINY, "dataset.synthetic.num_devices": 5, "topology.kind": "random-regular"},
                        grid={"topology.degree": [2, 3, 4]})
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--quiet"]) == 1
    err = capsys.readouterr().err
    table = {r["topology.degree"]: r for r in rows(out / "sweep.csv")}
    assert [table[d]["status"] for d in ("2", "3", "4")] == ["done", "failed", "done"]
    assert "degree=3 impossible for 5 devices" in table["3"]["error"]
    assert table["3"]["f1_macro_mean"] == "" and float(table["4"]["f1_macro_mean"]) > 0
    assert f"failed: {table['3']['cell']}" in err
    assert "Traceback" in (out / "failed" / f"{table['3']['cell']}.txt").read_text()  # kept for the user
    summary = {r["topology.degree"]: r for r in rows(out / "summary.csv")}
    assert (summary["3"]["n"], summary["3"]["failed"]) == ("0", "1")


def test_bad_sweep_file_is_refused_one_line_per_problem(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({
        "scenario": str(ROOT / "scenarios" / "synthetic-small.yaml"), "methods": ["fedsub", "nosuch"],
        "seeds": [1, 1], "colour": "blue", "grid": {"seed": [1, 2]}}))
    assert main(["sweep", str(bad), "--out", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"{bad}: seeds: each entry may appear once, got [1, 1]",
        f"{bad}: grid: 'seed' is set by the sweep's 'seeds' list, not here",
        f"{bad}: colour: unknown key",
        f"{bad}: methods.1: unknown algorithm 'nosuch'; choose one of: {', '.join(sorted(ALGORITHMS))}; "
        "or name your own class as module:Class or path/to/file.py:Class"]
    assert not (tmp_path / "out").exists()

    values = write_sweep(tmp_path, name="values", methods=["fedsub", "fedprox"],
                         set={**TINY, "rounds": 0, "algorithm.nope": 1},
                         grid={"topology.k": [4, 1], "algorithm.mu": [0.1, -2]})
    assert main(["sweep", str(values), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{values}: set.algorithm.nope: no method of this sweep (fedsub, fedprox) has the option 'nope'"]
    values = write_sweep(tmp_path, name="values", methods=["fedsub", "fedprox"],
                         set={**TINY, "rounds": 0}, grid={"topology.k": [4, 1], "algorithm.mu": [0.1, -2]})
    assert main(["sweep", str(values), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{values}: set.rounds: Input should be greater than or equal to 1 (got 0)",
        f"{values}: grid.topology.k[1]: Input should be greater than or equal to 2 (got 1)",
        f"{values}: grid.algorithm.mu[1]: Input should be greater than or equal to 0 (got -2)"]
    assert main(["sweep", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"{tmp_path / 'nope.yaml'}: sweep file not found"
    assert main(["sweep", str(values), "--workers", "0"]) == 2


def test_cells_are_keyed_by_the_resolved_scenario(tmp_path):
    # lr 0.05 is synthetic-small's own value: the same resolved scenario, the same cell
    same = expand(read_sweep(write_sweep(tmp_path, grid={"training.lr": [0.05]})))
    plain = expand(read_sweep(write_sweep(tmp_path, name="plain", grid={})))
    assert [p.cell.id for p in same] == [p.cell.id for p in plain]
    other = expand(read_sweep(write_sweep(tmp_path, grid={"training.lr": [0.1]})))
    assert not {p.cell.id for p in other} & {p.cell.id for p in plain}
    # gossip-avg has no min_cluster_size: its two points share one cell; fedsub's do not
    shared = expand(read_sweep(write_sweep(tmp_path, seeds=[1], grid={"algorithm.min_cluster_size": [1, 2]})))
    assert len(shared) == 4 and len({p.cell.id for p in shared}) == 3
    fedsub = [p.cell for p in shared if p.method == "fedsub"]
    assert fedsub[0].folder.startswith("fedsub-") and fedsub[0].id != fedsub[1].id


def test_method_set_fixes_one_methods_options_and_bad_ones_are_named(tmp_path, capsys):
    """A paper's setting for one baseline (FedHome's fine-tuning rounds) without touching another
    method that has the same option (FedCLAR's)."""
    points = expand(read_sweep(write_sweep(tmp_path, methods=["fedhome", "fedclar"], seeds=[1], grid={},
                                           set={**TINY, "rounds": 8},
                                           method_set={"fedhome": {"algorithm.fine_tune_rounds": 3}})))
    resolved = {p.method: resolve(p.cell.scenario, p.method, p.cell.seed, p.cell.overrides).scenario.algorithm
                for p in points}
    assert resolved["fedhome"].options["fine_tune_rounds"] == 3
    assert resolved["fedclar"].options.get("fine_tune_rounds", 1) == 1
    bad = write_sweep(tmp_path, name="bad", methods=["fedhome", "fedclar"], grid={}, set={**TINY, "rounds": 8},
                      method_set={"fedhome": {"algorithm.fine_tune_rounds": -1, "algorithm.nope": 1},
                                  "ditto": {"algorithm.lam": 0.1}})
    assert main(["sweep", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{bad}: method_set.fedhome.algorithm.nope: fedhome has no option 'nope'",
        f"{bad}: method_set.ditto: not one of the sweep's methods (fedhome, fedclar)"]
    bad = write_sweep(tmp_path, name="bad", methods=["fedhome"], grid={}, set={**TINY, "rounds": 8},
                      method_set={"fedhome": {"algorithm.fine_tune_rounds": -1}})
    assert main(["sweep", str(bad), "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{bad}: method_set.fedhome: algorithm.fine_tune_rounds: Input should be greater")


def test_shipped_sweeps_expand(repo_root):
    files = sorted((repo_root / "sweeps").glob("*.yaml"))
    assert files
    for f in files:
        assert expand(read_sweep(f)), f


@pytest.mark.slow   # in the slow set .ci/run also runs
def test_scheduler_runs_the_sweep_on_separate_dask_processes(tiny_sweep, tmp_path):
    """A `dask scheduler` and two `dask worker` processes started apart from p2pfed, on 127.0.0.1."""
    sweep, out1 = tiny_sweep
    dask = [sys.executable, "-m", "dask"]
    address_file = tmp_path / "scheduler.json"
    logs = (tmp_path / "dask.log").open("w")
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--dashboard-address", ":0", "--scheduler-file", str(address_file)],
                              stdout=logs, stderr=logs)]
    try:
        deadline = time.monotonic() + 120
        while not address_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        for _ in range(2):
            procs.append(subprocess.Popen([*dask, "worker", "--scheduler-file", str(address_file),
                                           "--nworkers", "1", "--nthreads", "1", "--host", "127.0.0.1"],
                                          stdout=logs, stderr=logs))
        address = json.loads(address_file.read_text())["address"]
        from distributed import Client
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)
        out = tmp_path / "out"
        done = subprocess.run([sys.executable, "-m", "p2pfed.cli.main", "sweep", str(sweep), "--out", str(out),
                               "--scheduler", address, "--quiet"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert f"2 Dask worker(s) on {address}" in done.stderr
        assert rows(out / "sweep.csv") == rows(out1 / "sweep.csv")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
        logs.close()


@pytest.mark.slow   # in the slow set .ci/run also runs
def test_ctrl_c_stops_cleanly_and_resume_finishes(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) mid-sweep, then --resume.
    The child gets SIGINT's default disposition back, as under a terminal: a suite started in the
    background (``cmd &``, nohup) ignores SIGINT, children inherit that, and the sweep would then
    rightly run to the end. 16 cells of 30 rounds leave seconds of work after the first one."""
    sweep = write_sweep(tmp_path, seeds=[1, 2, 3, 4], set={**TINY, "rounds": 30})
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "p2pfed.cli.main", "sweep", str(sweep), "--out", str(out), "--quiet"]
    p = subprocess.Popen([*cmd, "--workers", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not any(
            not d.name.startswith(".") for d in (out / "cells").glob("*")):
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "--resume` runs the rest" in err
    done = [d.name for d in (out / "cells").iterdir() if not d.name.startswith(".")]
    assert 1 <= len(done) < 16
    again = subprocess.run([*cmd, "--workers", "2", "--resume"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"{len(done)} already done, {16 - len(done)} to run" in again.stderr
    assert all(r["status"] == "done" for r in rows(out / "sweep.csv"))


@pytest.mark.slow   # in the slow set .ci/run also runs (the default suite's 10 minutes)
def test_collaboration_gain_reads_a_data_fraction_sweep(tmp_path, capsys):
    """bench/collaboration_gain.py: per fraction, each method against local training at the same
    fraction (the paired row of paired.csv, sign turned so that a gain is method - local)."""
    sweep = write_sweep(tmp_path, name="fractions", methods=["local", "gossip-avg"],
                        grid={"dataset.train_fraction": [0.5, 1.0]})
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import collaboration_gain
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert collaboration_gain.main([str(out)]) == 0
    table = rows(out / "collaboration_gain.csv", drop=())
    assert [(r["method"], float(r["train_fraction"])) for r in table] == [("gossip-avg", 0.5), ("gossip-avg", 1.0)]
    paired = rows(out / "paired.csv")
    for r in table:
        fraction = float(r["train_fraction"])
        row = next(p for p in paired if {collaboration_gain.parse(p["a"]), collaboration_gain.parse(p["b"])}
                   == {("local", fraction), ("gossip-avg", fraction)})
        sign = 1 if row["a"].startswith("gossip-avg") else -1
        assert float(r["gain"]) == pytest.approx(sign * float(row["f1_diff"]))
        assert float(r["gain_ci_low"]) <= float(r["gain"]) <= float(r["gain_ci_high"])
    assert (out / "collaboration_gain.png").stat().st_size > 0


def test_paired_table_bolds_only_what_the_adjusted_p_supports(tiny_sweep, capsys):
    """bench/paired_table.py: a README's paired columns, each cell from paired.csv (sign turned
    when the baseline is the file's ``a``), bold exactly where the adjusted p is below 0.05."""
    _, out = tiny_sweep
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import paired_table
    finally:
        sys.path.remove(str(ROOT / "bench"))
    for protocol in ("after-fusion", "after-training"):   # the headline (default), then the other
        args = [] if protocol == "after-fusion" else ["--protocol", protocol]
        assert paired_table.main([str(out), "--against", "gossip-avg training.lr=0.05", *args]) == 0
        _check_paired_table(capsys.readouterr().out, [r for r in rows(out / "paired.csv") if r["protocol"] == protocol],
                            protocol, paired_table.signed)


def _check_paired_table(printed: str, paired: list[dict[str, str]], protocol: str, signed) -> None:
    assert f"protocol: {protocol}; unit: seed, n = 2" in printed and "benjamini-hochberg" in printed
    for r in paired:
        if r["b"] != "gossip-avg training.lr=0.05":
            continue
        line = next(x for x in printed.splitlines() if x.startswith(f"| {r['a']} |"))
        cell_text = line.split(" | ")[1]
        if r["p_value"] == "":
            assert "no spread" in cell_text
            continue
        assert cell_text.startswith("**") == (float(r["p_adjusted"]) < 0.05)
        assert signed(float(r["f1_diff"])) in cell_text


@pytest.mark.slow   # three more small sweeps; in the slow set .ci/run also runs (the default suite's 10 minutes)
def test_pool_seeds_joins_seeds_run_later_and_refuses_another_setting(tiny_sweep, tmp_path, capsys):
    """bench/pool_seeds.py: seeds added later in another folder join the first folder's table as
    one sweep of more seeds; a run repeated in both must agree; another setting is refused."""
    sweep, out = tiny_sweep
    more = tmp_path / "more"
    assert main(["sweep", str(sweep), "--out", str(more), "--seeds", "2,3", "--workers", "1", "--quiet"]) == 0
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import pool_seeds
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert pool_seeds.main([str(tmp_path / "pooled"), str(out), str(more)]) == 0
    summary = rows(tmp_path / "pooled" / "summary.csv")
    assert len(summary) == 4 and {r["n"] for r in summary} == {"3"}          # 2 methods x 2 rates, seeds 1-3
    paired = rows(tmp_path / "pooled" / "paired.csv")
    assert {r["n"] for r in paired} == {"3"} and {r["unit"] for r in paired} == {"seed"}
    other = tmp_path / "other"
    assert main(["sweep", str(sweep), "--out", str(other), "--seeds", "4", "--set", "rounds=3", "--workers", "1",
                 "--quiet"]) == 0
    with pytest.raises(SystemExit, match=r"another setting than .* \(rounds\)"):
        pool_seeds.pool([out, other])
    _, _, points = store.read_manifest(more)       # a run repeated in both folders that disagrees
    summary_file = store.cell_dir(more, next(p.cell for p in points if p.seed == 2)) / "summary.json"
    data = json.loads(summary_file.read_text())
    data["final"]["f1_macro_mean"] += 0.01
    summary_file.write_text(json.dumps(data))
    with pytest.raises(SystemExit, match="gave another F1"):
        pool_seeds.pool([out, more])


def test_a_configurations_label_leaves_out_a_swept_option_its_method_ran_without():
    """Read from the cell's summary.json (its resolved options), so ``p2pfed report`` needs neither
    the method's code nor its name resolved again."""
    from p2pfed.sweeps.aggregate import CellResult
    from p2pfed.sweeps.cells import CellSpec, Point
    from p2pfed.sweeps.paired import label

    def result(method: str, options: dict) -> CellResult:
        cell = CellSpec("0" * 64, method, 1, None, ())
        point = Point(method, 1, (("algorithm.fusion", "overlap"), ("training.lr", 0.1)), cell)
        return CellResult(point, "done", summary={"algorithm": method,
                                                  "config": {"algorithm": {"name": method, **options}}})

    assert label(result("fedsub", {"fusion": "overlap"})) == "fedsub algorithm.fusion=overlap training.lr=0.1"
    assert label(result("gossip-avg", {})) == "gossip-avg training.lr=0.1"
