"""Bad input, by class: each is refused before any work, one line naming the file and the field
(and the damaged file's line), exit code 2, never a traceback; and results are never left
half-written or non-JSON."""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from p2pfed.algorithms import Algorithm, MemoryTerm
from p2pfed.cli.main import main
from p2pfed.peer.config import load_peer_config
from p2pfed.peer.data import DataFileError, load_own_data
from p2pfed.peer.keys import make_keys
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.budget import memory_problems
from p2pfed.scenario.loader import load_scenario, with_algorithm
from p2pfed.scenario.errors import ScenarioError

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "scenarios" / "synthetic-small.yaml"
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def validate(capsys, *argv: str) -> list[str]:
    """``p2pfed validate ...``: must exit 2 without a traceback; returns its lines."""
    assert main(["validate", *argv]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return (out + err).strip().splitlines()


# -- numbers: finite, and in a documented range --------------------------------------------------
def test_nan_and_infinity_are_refused_everywhere_naming_the_field(tmp_path, capsys):
    sets = ["training.lr=.inf", "topology.latency_s=.inf", "topology.bandwidth_bps=.inf",
            "contacts.area_m=[.nan, 10]", "contacts.duration_s=-.inf", "algorithm.cache_max_age_s=.nan"]
    lines = validate(capsys, str(SMALL), *[x for s in sets for x in ("--set", s)])
    fields = sorted(re.match(rf"{re.escape(str(SMALL))}: ([\w.]+): must be a finite number", line).group(1)
                    for line in lines)
    assert fields == sorted(["training.lr", "topology.latency_s", "topology.bandwidth_bps",
                             "contacts.area_m.0", "contacts.duration_s", "algorithm.cache_max_age_s"])
    # A peer file too.
    make_keys(tmp_path / "keys", ["a"])
    peer = tmp_path / "peer.yaml"
    peer.write_text("id: 0\nlisten: tcp://127.0.0.1:5555\nround_timeout_s: .inf\n")
    with pytest.raises(ScenarioError) as err:
        load_peer_config(peer, insecure=True)
    assert err.value.problems == [f"{peer}: round_timeout_s: must be a finite number (NaN and "
                                  "infinity are refused) (got inf)"]


def test_fields_whose_extremes_crash_a_run_have_an_upper_bound(capsys):
    lines = validate(capsys, str(SMALL), "--set", "seed=-1", "--set", "engine.torch_threads=100000",
                     "--set", "engine.max_message_bytes=1000000000000000000000000",
                     "--set", "contacts.speed_mps=[2, 1]", "--set", "dataset.synthetic.classes_per_device=5")
    fields = sorted(re.match(rf"{re.escape(str(SMALL))}: ([\w.]+): ", line).group(1) for line in lines)
    assert fields == sorted(["seed", "engine.torch_threads", "engine.max_message_bytes",
                             "contacts.speed_mps", "dataset.synthetic.classes_per_device"])


def test_a_run_that_cannot_fit_in_memory_is_refused_naming_the_field(capsys):
    lines = validate(capsys, str(SMALL), "--set", "rounds=1000000000000",
                     "--set", "model.hidden=[10000000, 10000000]", "--set", "algorithm.kmeans_n_init=10000000000000")
    assert [line.split(": ")[1] for line in lines] == ["model.hidden", "algorithm.kmeans_n_init", "rounds"]
    assert all("of memory" in line for line in lines)
    # The check is against the memory given: the quickstart fits a normal machine, not 1 MiB.
    quickstart = load_scenario(QUICKSTART)
    assert memory_problems(quickstart, available=8 * 2**30) == []
    (problem,) = memory_problems(quickstart, available=2**20)
    assert problem.startswith(f"{QUICKSTART}: model.hidden: the run would need at least")
    rwp = load_scenario(SMALL, ["contacts.kind=random-waypoint", "contacts.duration_s=1e9"])
    problems = memory_problems(rwp, available=2**30)
    assert [p.split(": ")[1] for p in problems] == ["contacts.step_s"]
    # ...but random waypoint no longer grows with device pairs (a k-d tree finds the pairs in
    # range): 1,000 devices walking for 8 hours sampled every 2 s fit in 4 GiB
    crowd = load_scenario(SMALL, ["contacts.kind=random-waypoint", "contacts.duration_s=28800",
                                  "contacts.step_s=2", "dataset.synthetic.num_devices=1000"])
    assert memory_problems(crowd, available=4 * 2**30) == []


def test_a_method_sizes_its_own_structures_for_the_memory_check():
    class Hungry(Algorithm):
        """A method whose own table grows with an option of its own."""

        name = "hungry"

        @classmethod
        def memory_terms(cls, options, facts):
            return [MemoryTerm("algorithm.table_rows", facts.devices * 2**40, f"{facts.devices} devices × 1 TiB")]

    small = load_scenario(SMALL)
    plain, hungry = (replace(small, method=m, options=m.Options()) for m in (Algorithm, Hungry))
    assert memory_problems(plain, available=2**30) == []
    (problem,) = memory_problems(hungry, available=2**30)
    assert problem.startswith(f"{SMALL}: algorithm.table_rows: the run would need at least ")
    assert f"({small.scenario.dataset.synthetic.num_devices} devices × 1 TiB)" in problem


# -- files: a damaged or wrong-format file names itself, its line, and the field -------------------
def _npz_with_objects(path: Path) -> None:
    np.savez(path, x=np.array([{"a": 1}], dtype=object), user=np.zeros(1), label=np.zeros(1),
             feature_names=np.array(["f"]), class_names=np.array(["c"]))


def _truncated_npz(path: Path) -> None:
    """Starts like a zip (numpy then hands it to zipfile: BadZipFile) but is cut short."""
    np.savez(path, x=np.zeros((3, 2)))
    path.write_bytes(path.read_bytes()[:60])


def _corrupted_npz(path: Path) -> None:
    """A whole zip whose array bytes were altered: its CRC no longer matches."""
    np.savez(path, x=np.arange(400.0), user=np.zeros(400), label=np.zeros(400),
             feature_names=np.array(["f"]), class_names=np.array(["c"]))
    data = bytearray(path.read_bytes())
    data[300:310] = b"\xff" * 10
    path.write_bytes(bytes(data))


GRAPHML_STRING_BANDWIDTH = """<?xml version='1.0' encoding='utf-8'?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key id="d0" for="edge" attr.name="bandwidth_bps" attr.type="string" />
  <graph edgedefault="undirected">
    <node id="0" /><node id="1" />
    <edge source="0" target="1"><data key="d0">fast</data></edge>
  </graph>
</graphml>
"""

FILE_CASES = {
    # name: (file name, how to write it, --set overrides, field, expected problem after the file)
    "npz not a zip": ("d.npz", lambda p: p.write_bytes(b"garbage"), ["dataset.path={f}"],
                      "dataset.path", r": not an \.npz file"),
    "npz truncated": ("d.npz", _truncated_npz, ["dataset.path={f}"], "dataset.path", r": not an \.npz file"),
    "npz corrupted": ("d.npz", _corrupted_npz, ["dataset.path={f}"], "dataset.path",
                      r": array 'x' cannot be read: Bad CRC-32"),
    "npz with objects": ("d.npz", _npz_with_objects, ["dataset.path={f}"], "dataset.path",
                         r": array 'x' cannot be read: it holds Python objects"),
    "arff binary": ("d.arff", lambda p: p.write_bytes(b"@relation x\n\x80\x81\n"), ["dataset.path={f}"],
                    "dataset.path", r":2: not a text \(UTF-8\) ARFF file"),
    "edge list negative bandwidth": ("t.edgelist", lambda p: p.write_text("0 1 1e6 0.1\n1 2 -5 0.1\n"),
                                     ["topology.kind=file", "topology.file={f}"], "topology.file",
                                     r":2: bandwidth_bps must be a finite number > 0, got -5\.0"),
    "edge list infinite latency": ("t.edgelist", lambda p: p.write_text("# c\n0 1 1e6 inf\n"),
                                   ["topology.kind=file", "topology.file={f}"], "topology.file",
                                   r":2: latency_s must be a finite number >= 0"),
    "edge list three fields": ("t.edgelist", lambda p: p.write_text("0 1\n1 2 fast\n"),
                               ["topology.kind=file", "topology.file={f}"], "topology.file",
                               r":2: expected 'a b' or 'a b bandwidth_bps latency_s'"),
    "edge list binary": ("t.edgelist", lambda p: p.write_bytes(b"0 1\n\xff\xfe\n"),
                         ["topology.kind=file", "topology.file={f}"], "topology.file",
                         r":2: not a text \(UTF-8\) edge list"),
    "graphml string bandwidth": ("t.graphml", lambda p: p.write_text(GRAPHML_STRING_BANDWIDTH),
                                 ["topology.kind=file", "topology.file={f}"], "topology.file",
                                 r": edge 0-1: bandwidth_bps must be a finite number > 0, got 'fast'"),
    "graphml malformed": ("t.graphml", lambda p: p.write_text("<graphml><graph>\n<node id='0'>\n"),
                          ["topology.kind=file", "topology.file={f}"], "topology.file",
                          r": cannot read GraphML: .*line \d+, column \d+"),
    "trace binary": ("c.txt", lambda p: p.write_bytes(b"a b 0 10\n\x80\n"),
                     ["contacts.kind=trace", "contacts.format=interval", "contacts.file={f}"],
                     "contacts.file", r":2: not a text \(UTF-8\) trace"),
    "trace infinite time": ("c.txt", lambda p: p.write_text("a b 0 10\na b 20 inf\n"),
                            ["contacts.kind=trace", "contacts.format=interval", "contacts.file={f}"],
                            "contacts.file", r":2: end must be a finite number"),
}


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_damaged_files_are_one_line_naming_field_file_and_line(case, tmp_path, capsys):
    name, write, sets, field, problem = FILE_CASES[case]
    f = tmp_path / name
    write(f)
    scenario = QUICKSTART if field == "dataset.path" else SMALL
    (line,) = validate(capsys, str(scenario), *[x for s in sets for x in ("--set", s.format(f=f))])
    assert re.match(rf"{re.escape(str(scenario))}: {field}: {re.escape(str(f))}{problem}", line), line


def test_binary_and_empty_scenario_files_are_refused(tmp_path, capsys):
    binary, empty = tmp_path / "b.yaml", tmp_path / "e.yaml"
    binary.write_bytes(b"rounds: 3\n\x80\x81\n")
    empty.write_text("# nothing but a comment\n")
    assert validate(capsys, str(binary), str(empty)) == [f"{binary}:2: not a text (UTF-8) scenario file",
                                                         f"{empty}: the scenario file is empty "
                                                         "(it must set at least one key)"]


def test_a_damaged_file_stops_run_before_any_work(tmp_path, capsys, monkeypatch):
    import p2pfed.engine.runner as runner

    monkeypatch.setattr(runner, "run_scenario", lambda *a, **k: pytest.fail("the run started"))
    edges = tmp_path / "t.edgelist"
    edges.write_text("0 1 -1 0\n")
    out = tmp_path / "out"
    assert main(["run", str(SMALL), "--out", str(out), "--set", "topology.kind=file",
                 "--set", f"topology.file={edges}"]) == 2
    assert "topology.file" in capsys.readouterr().err and not out.exists()


def test_peer_data_files_name_the_file_and_line(tmp_path):
    def load(path: Path):
        return load_own_data(path, 0, num_features=2, num_classes=3, test_fraction=0.25, seed=0)

    cases = {"a.csv": (b"f1,f2,label\n1,2,0\n1,x,1\n", r"a\.csv:3: every cell must be a number"),
             "b.csv": (b"1,2,0\n1,2,nan\n", r"b\.csv:2: holds NaN or infinite values"),
             "c.csv": (b"1,2,0\n1,2,0.5\n", r"c\.csv:2: the last column \(label\) must be an integer"),
             "d.csv": (b"1,2,0\n1,2\n", r"d\.csv:2: 2 columns, earlier rows have 3"),
             "e.csv": (b"\x80\x81,2\n", r"e\.csv: not a text \(UTF-8\) CSV file"),
             "f.npz": (b"PK\x03\x04garbage", r"f\.npz: not an \.npz file")}
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(DataFileError, match=message):
            load(tmp_path / name)


# -- outputs: checked before any work; written atomically; strict JSON ---------------------------------
def test_outputs_that_cannot_be_written_are_refused_before_any_work(tmp_path, capsys, monkeypatch):
    import p2pfed.engine.runner as runner

    monkeypatch.setattr(runner, "run_scenario", lambda *a, **k: pytest.fail("the run started"))
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    assert main(["run", str(SMALL), "--out", str(a_file)]) == 2
    assert capsys.readouterr().err.strip() == f"--out {a_file}: exists and is not a folder"
    assert main(["run", str(SMALL), "--out", str(a_file / "sub")]) == 2
    assert capsys.readouterr().err.strip() == f"--out {a_file / 'sub'}: cannot be made, {a_file} is a file"
    (tmp_path / "cmp").mkdir()
    (tmp_path / "cmp" / "local").write_text("x")
    assert main(["compare", str(SMALL), "--algorithms", "fedsub,local", "--out", str(tmp_path / "cmp")]) == 2
    assert f"--out {tmp_path / 'cmp' / 'local'}: exists and is not a folder" in capsys.readouterr().err
    peer = tmp_path / "peer.yaml"
    peer.write_text(f"id: 0\nlisten: tcp://127.0.0.1:5555\nout: {a_file}\n")
    with pytest.raises(ScenarioError) as err:
        load_peer_config(peer, insecure=True)
    assert err.value.problems == [f"{peer}: out: {a_file}: exists and is not a folder"]


def test_a_write_that_fails_after_the_check_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    """The disk can fill up or a folder turn read-only during a run: one line, exit 1, no traceback."""
    import errno

    # graph_files binds write_csv when first imported: imported here, before the patch, so that the
    # patched writer does not outlive this test in it
    from p2pfed.results import files, graph_files  # noqa: F401

    def full_disk(path, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(files, "write_csv", full_disk)
    out = tmp_path / "out"
    assert main(["run", str(SMALL), "--out", str(out), "--quiet", "--set", "rounds=1",
                 "--set", "dataset.synthetic.num_devices=3"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"p2pfed: error: {out / 'rounds.csv'}: No space left on device"
    assert "Traceback" not in "\n".join(err)


def _strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_results_are_strict_json_and_a_crash_leaves_no_summary(tmp_path, monkeypatch):
    from p2pfed.learning.training import Evaluation
    from p2pfed.results import files, plots

    recorder = Recorder(2)
    recorder.evaluated(0, 0, 1.0, Evaluation(0.5, 0.1, 0.6))
    recorder.evaluated(1, 0, 1.0, Evaluation(0.7, 0.2, 0.8))
    summary = {"scenario": "s", "algorithm": "a", "final": {"f1": float("nan")}, "x": [float("inf"), 1.5]}
    files.write_run(tmp_path, summary, recorder, ["d0", "d1"])
    assert _strict_json((tmp_path / "summary.json").read_text()) == {
        "scenario": "s", "algorithm": "a", "final": {"f1": None}, "x": [None, 1.5]}
    # A crash while writing (here: the plot) leaves no summary.json, not even the earlier run's,
    # and no temporary files.
    monkeypatch.setattr(plots, "plot_comparison", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        files.write_run(tmp_path, summary, recorder, ["d0", "d1"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["devices.csv", "plot.png", "rounds.csv"]


# -- command-line values -------------------------------------------------------------------------
def test_compare_refuses_a_bad_method_list_without_writing_anything(tmp_path, capsys):
    out = tmp_path / "cmp"
    for value, message in [(",", "--algorithms ',': give at least one method"),
                           ("fedsub,,fedsub", "--algorithms: fedsub listed twice"),
                           ("fedsub,nope", "--algorithms: unknown algorithm 'nope'; choose one of:")]:
        assert main(["compare", str(SMALL), "--algorithms", value, "--out", str(out)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(message)
    assert not out.exists()


def test_option_values_are_one_line_errors(capsys):
    for argv, message in [(["launch", "--peers", "0"], "argument --peers: must be a finite number >= 1, got '0'"),
                          (["launch", "--timeout", "nan"], "argument --timeout: must be a finite number > 0"),
                          (["keys", "--out", "k", "--peers", "-2"], "argument --peers: must be a finite number >= 1")]:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert message in line


def test_set_algorithm_name_swaps_the_method_like_the_algorithm_option():
    swapped = load_scenario(QUICKSTART, ["algorithm.name=gossip-avg"])
    assert swapped.scenario == with_algorithm(load_scenario(QUICKSTART), "gossip-avg").scenario
    assert swapped.scenario.algorithm.options == {}
    # An option given on the command line for the new method is kept, and checked.
    prox = load_scenario(QUICKSTART, ["algorithm.name=fedprox", "algorithm.mu=0.5"])
    assert prox.scenario.algorithm.options == {"mu": 0.5}
    with pytest.raises(ScenarioError, match="algorithm.fusion: unknown key"):
        load_scenario(QUICKSTART, ["algorithm.fusion=overlap", "algorithm.name=gossip-avg"])
    # --algorithm is that override, in run and in launch (whose peers re-read the overrides).
    from p2pfed.cli.main import _overrides, build_parser

    for command in ("run", "launch"):
        args = build_parser().parse_args([command, "--set", "rounds=2", "--algorithm", "local"])
        assert _overrides(args) == ["rounds=2", "algorithm.name=local"]


# -- keys and endpoints --------------------------------------------------------------------------
def _peer_file(tmp_path: Path, **fields) -> Path:
    make_keys(tmp_path / "keys", ["peer-0", "peer-1"])
    cfg = {"id": 0, "listen": "tcp://127.0.0.1:5555", "secret_key": "keys/peer-0.key_secret",
           "neighbours": [{"id": 1, "endpoint": "tcp://127.0.0.1:5556", "public_key": "keys/peer-1.key"}],
           "out": "out", **fields}
    path = tmp_path / "peer.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _shorten_key(path: Path, which: str) -> None:
    text = path.read_text()
    path.write_text(re.sub(rf'{which}-key = "(.{{40}})"', lambda m: f'{which}-key = "{m.group(1)[:35]}"', text))


def test_curve_keys_of_the_wrong_length_are_refused_when_the_peer_file_loads(tmp_path):
    peer = _peer_file(tmp_path)
    assert load_peer_config(peer).config.id == 0
    _shorten_key(tmp_path / "keys/peer-0.key_secret", "secret")
    _shorten_key(tmp_path / "keys/peer-1.key", "public")
    with pytest.raises(ScenarioError) as err:
        load_peer_config(peer)
    keys = tmp_path / "keys"
    assert err.value.problems == [
        f"{peer}: secret_key: {keys / 'peer-0.key_secret'}: the CURVE secret key must be 40 Z85 characters, got 35",
        f"{peer}: neighbours.0.public_key: {keys / 'peer-1.key'}: the CURVE public key must be 40 Z85 "
        "characters, got 35"]


def test_tcp_ports_above_65535_are_refused(tmp_path):
    peer = _peer_file(tmp_path, listen="tcp://127.0.0.1:99999",
                      neighbours=[{"id": 1, "endpoint": "tcp://127.0.0.1:70000", "public_key": "keys/peer-1.key"}])
    with pytest.raises(ScenarioError) as err:
        load_peer_config(peer)
    assert [p.split(": ")[1] for p in err.value.problems] == ["listen", "neighbours.0.endpoint"]
    assert all("port in 1..65535" in p for p in err.value.problems)


def test_packaged_npz_reader_still_reads_a_good_file(tmp_path):
    """The safe reader refuses damaged files, not good ones (a zip written by numpy)."""
    from p2pfed.data.npz import load_npz

    np.savez_compressed(tmp_path / "ok.npz", a=np.arange(3), b=np.ones((2, 2)))
    assert zipfile.is_zipfile(tmp_path / "ok.npz")
    arrays = load_npz(tmp_path / "ok.npz", ("a", "b"))
    assert arrays["a"].tolist() == [0, 1, 2] and arrays["b"].shape == (2, 2)


# -- networks in which some devices never meet anyone ----------------------------------------------
def test_a_topology_file_that_cuts_devices_off_is_refused_naming_them(tmp_path, capsys):
    """Twelve nodes in two parts would run to complete-looking results in which three devices never
    learn from the others: refused naming the file and those nodes, unless the scenario opts in."""
    edges = tmp_path / "split.edgelist"
    edges.write_text("".join(f"{i} {i + 1}\n" for i in range(8)) + "9 10\n10 11\n")
    sets = ["--set", "topology.kind=file", "--set", f"topology.file={edges}"]
    (line,) = validate(capsys, str(SMALL), *sets)
    assert line == (f"{SMALL}: topology.file: {edges}: nodes 9, 10, 11 have no path to the other 9 (2 separate "
                    "parts); connect them, or set topology.allow_disconnected: true")
    out = tmp_path / "out"
    assert main(["run", str(SMALL), "--quiet", "--out", str(out), *sets, "--set", "rounds=1",
                 "--set", "topology.allow_disconnected=true"]) == 0
    assert json.loads((out / "summary.json").read_text())["topology"]["edges"] == 10


def test_a_trace_whose_contacts_involve_none_of_the_devices_is_refused_even_with_mismatch_allowed(tmp_path, capsys):
    trace = ROOT / "topologies" / "example-interval.txt"
    sets = ["--set", "contacts.kind=trace", "--set", "contacts.format=interval", "--set", f"contacts.file={trace}",
            "--set", "contacts.allow_node_mismatch=true",
            "--set", f"contacts.nodes=[{', '.join(f'u{i}' for i in range(12))}]"]   # ids the file never names
    (line,) = validate(capsys, str(SMALL), *sets)
    assert line.startswith(f"{SMALL}: contacts.file: {trace}: none of its 7 contacts is between two of the "
                           "scenario's 12 devices within the run's window (trace ids used as devices: none)")
    assert line.endswith("or set contacts.allow_no_contacts: true")
    # a window after the trace's last contact is the same mistake
    (line,) = validate(capsys, str(SMALL), *sets[:8], "--set", "contacts.start_s=5000")
    assert "none of its 7 contacts" in line and "trace ids used as devices: 0, 1, 2, 3" in line
    out = tmp_path / "out"
    assert main(["run", str(SMALL), "--quiet", "--out", str(out), *sets, "--set", "contacts.duration_s=60",
                 "--set", "contacts.allow_no_contacts=true"]) == 0
    assert json.loads((out / "summary.json").read_text())["comm"]["transfers_started"] == 0
