"""A researcher's own data (``dataset.name: files``): tables, .npz files and folders, with one
clear line per problem naming the file and column."""
from __future__ import annotations

import json

import sys

import numpy as np
import pytest

from p2pfed.cli.main import main
from p2pfed.data import DataError, PartitionSpec, load_files
from p2pfed.scenario.loader import load_scenario
from p2pfed.scenario.errors import ScenarioError

HEADER = "device,label,f0,f1\n"


def _rows(devices=("u1", "u2"), labels=("walk", "sit"), per=6, seed=0):
    rng = np.random.default_rng(seed)
    lines = []
    for d in devices:
        for lab in labels:
            for _ in range(per):
                lines.append(f"{d},{lab},{rng.normal():.3f},{rng.normal() + 5:.3f}\n")
    return lines


def _csv(tmp_path, lines, header=HEADER, name="data.csv"):
    path = tmp_path / name
    path.write_text(header + "".join(lines))
    return path


def _problem(path, **kw) -> str:
    with pytest.raises(DataError) as info:
        load_files(path, **kw)
    assert len(info.value.problems) >= 1
    return info.value.problems[0]


def test_csv_devices_labels_and_scaling(tmp_path):
    lines = _rows(devices=("u2", "u1"), labels=("walk", "sit")) + _rows(devices=("u3",), labels=("run", "walk"))
    data = load_files(_csv(tmp_path, lines), seed=1)
    assert [d.name for d in data.devices] == ["u1", "u2", "u3"]          # sorted device values
    assert data.class_names == ["run", "sit", "walk"]                  # sorted labels -> 0, 1, 2
    assert data.num_features == 2 and data.num_classes == 3
    counts = data.class_counts()
    np.testing.assert_array_equal(counts, [[0, 6, 6], [0, 6, 6], [6, 0, 6]])
    for dev in data.devices:                                           # device's own train statistics
        np.testing.assert_allclose(dev.x_train.mean(axis=0), 0, atol=1e-5)
        assert dev.num_test > 0
    assert data.partition == {"kind": "natural", "by": "device", "source": str(tmp_path / "data.csv")}


def test_numeric_labels_keep_their_names(tmp_path):
    lines = _rows(labels=("3", "9")) + _rows(devices=("u3",), labels=("7", "3"))
    data = load_files(_csv(tmp_path, lines))
    assert data.class_names == ["3", "7", "9"]
    u3 = data.devices[2]
    assert set(np.concatenate([u3.y_train, u3.y_test])) == {0, 1}      # "3" -> 0, "7" -> 1 everywhere


def test_class_names_fix_the_label_space(tmp_path):
    path = _csv(tmp_path, _rows(labels=("0", "2")))
    data = load_files(path, class_names=["a", "b", "c"])
    assert data.num_classes == 3 and data.class_names == ["a", "b", "c"]
    assert set(data.devices[0].y_train) == {0, 2}


@pytest.mark.parametrize("lines, header, kw, expected", [
    (_rows(), "device,class,f0,f1\n", {}, "column 'label': missing (the label column"),
    (_rows()[:3] + ["u1,walk,abc,1.0\n"] + _rows()[3:], HEADER, {}, "column 'f0': 'abc' is not a number (line 5)"),
    (_rows()[:1] + ["u1,,0.1,1.0\n"] + _rows()[1:], HEADER, {}, "column 'label': missing label (line 3)"),
    (_rows(labels=("1", "2"))[:2] + ["u1,NaN,0.1,1.0\n"] + _rows(labels=("1", "2"))[2:], HEADER, {},
     "column 'label': missing label (line 4)"),
    (_rows(labels=("1", "2"))[:2] + ["u1,1.5,0.1,1.0\n"] + _rows(labels=("1", "2"))[2:], HEADER, {},
     "column 'label': label 1.5 is not an integer class id (line 4)"),
    (_rows(labels=("0", "4")), HEADER, {"class_names": ["a", "b", "c"]},
     "column 'label': label 4 is out of range 0..2"),
    (_rows(labels=("walk", "sitt")), HEADER, {"class_names": ["walk", "sit"]},
     "column 'label': label 'sitt' is not one of dataset.class_names"),
    (_rows() + ["u9,walk,0.1,1.0\n"], HEADER, {},
     "column 'device': device 'u9' has 1 sample(s), too few to split"),
    (_rows() + [",walk,0.1,1.0\n"], HEADER, {}, "column 'device': missing device (line 26)"),
    (_rows() + ["u1,walk,0.1\n"], HEADER, {}, "line 26: 3 fields, the header has 4"),
    (_rows() + ["u1,walk,inf,0\n"], HEADER, {}, "column 'f0': infinite value (line 26)"),
    (_rows(labels=("walk",)), HEADER, {}, "column 'label': a single class ('walk')"),
    (_rows(), "device,label\n", {}, "no feature columns"),
])
def test_malformed_csv_names_file_and_column(tmp_path, lines, header, kw, expected):
    if header == "device,label\n":
        lines = [",".join(line.split(",")[:2]) + "\n" for line in lines]
    path = _csv(tmp_path, lines, header)
    problem = _problem(path, **kw)
    assert problem.startswith(f"{path}: ")
    assert expected in problem


def test_every_bad_column_is_reported(tmp_path):
    lines = _rows()
    lines[0] = "u1,,x,y\n"
    with pytest.raises(DataError) as info:
        load_files(_csv(tmp_path, lines))
    assert [p.split(": ", 2)[1] for p in info.value.problems] == ["column 'f0'", "column 'f1'", "column 'label'"]


def test_empty_feature_cells_are_missing_values(tmp_path):
    lines = _rows()
    lines[0] = "u1,walk,,1.0\n"
    data = load_files(_csv(tmp_path, lines))
    assert all(np.isfinite(d.x_train).all() and np.isfinite(d.x_test).all() for d in data.devices)


def test_columns_are_configurable(tmp_path):
    header = "user,activity,f0,f1\n"
    data = load_files(_csv(tmp_path, _rows(), header), device_column="user", label_column="activity")
    assert len(data.devices) == 2 and data.num_features == 2


def test_drawn_partition_ignores_the_device_column(tmp_path):
    lines = _rows(devices=("u1", "u2", "u3", "u4"), labels=("a", "b", "c"), per=10)
    spec = PartitionSpec(kind="dirichlet", num_devices=5, alpha=1.0, min_samples=8)
    data = load_files(_csv(tmp_path, lines), partition_spec=spec, seed=3)
    assert len(data.devices) == 5 and data.num_features == 2
    assert data.class_counts().sum() == 120
    assert data.partition["kind"] == "dirichlet" and data.partition["alpha"] == 1.0
    # and no device column is needed then
    no_device = [line.split(",", 1)[1] for line in lines]
    data = load_files(_csv(tmp_path, no_device, "label,f0,f1\n", "nodev.csv"), partition_spec=spec, seed=3)
    assert data.num_features == 2


def test_npz_file(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3))
    path = tmp_path / "all.npz"
    np.savez(path, x=x, label=np.tile(["cat", "dog"], 20), device=np.repeat([7, 8], 20))
    data = load_files(path)
    assert [d.name for d in data.devices] == ["7", "8"] and data.class_names == ["cat", "dog"]
    assert data.num_features == 3


def test_npz_without_label_array_says_how_to_name_it(tmp_path):
    path = tmp_path / "xy.npz"
    np.savez(path, x=np.zeros((10, 2)), y=np.arange(10) % 2, device=np.zeros(10))
    problem = _problem(path)
    assert problem == (f"{path}: array 'label': missing (arrays: x, y, device; features go in 'x', "
                       f"set dataset.label_column / dataset.device_column to name the others)")
    assert len(load_files(path, label_column="y", partition_spec=PartitionSpec(
        kind="iid", num_devices=2, min_samples=4)).devices) == 2


def test_npz_object_arrays_are_refused_without_unpickling(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, x=np.zeros((4, 2)), label=np.array([1, "a", None, 2.0], dtype=object),
             device=np.zeros(4))
    assert "refused (they need pickle)" in _problem(path)


def test_folder_of_device_files(tmp_path):
    rng = np.random.default_rng(1)
    folder = tmp_path / "devices"
    folder.mkdir()
    np.savez(folder / "phone-b.npz", x=rng.normal(size=(12, 4)), label=np.tile([0, 5], 6))
    np.savez(folder / "phone-a.npz", x=rng.normal(size=(12, 4)), label=np.tile([5, 9], 6))
    (folder / "notes.txt").write_text("ignored")
    data = load_files(folder)
    assert [d.name for d in data.devices] == ["phone-a", "phone-b"]
    assert data.class_names == ["0", "5", "9"]
    np.testing.assert_array_equal(data.class_counts(), [[0, 6, 6], [6, 6, 0]])
    np.savez(folder / "phone-c.npz", x=rng.normal(size=(12, 3)), label=np.tile([0, 5], 6))
    assert _problem(folder) == f"{folder / 'phone-c.npz'}: array 'x': 3 features, but phone-a.npz has 4"


def test_a_scenario_names_a_folder_of_device_files(tmp_path, capsys):
    rng = np.random.default_rng(2)
    (tmp_path / "devices").mkdir()
    for name in ("a", "b"):
        np.savez(tmp_path / "devices" / f"{name}.npz", x=rng.normal(size=(12, 3)), label=np.tile([0, 1], 6))
    (tmp_path / "s.yaml").write_text("dataset: {name: files, path: devices}\n")
    assert main(["validate", str(tmp_path / "s.yaml")]) == 0, capsys.readouterr().err
    (tmp_path / "t.yaml").write_text("topology: {kind: file, file: devices}\n")   # a topology is one file
    assert main(["validate", str(tmp_path / "t.yaml")]) == 2
    assert "topology.file: not a file" in capsys.readouterr().out


def test_parquet_table(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"device": ["a"] * 10 + ["b"] * 10, "label": [0, 1] * 10,
                             "f0": np.arange(20.0), "f1": np.ones(20)}), path)
    data = load_files(path)
    assert [d.name for d in data.devices] == ["a", "b"] and data.num_features == 2
    pq.write_table(pa.table({"device": ["a"] * 10, "label": [0, 1] * 5, "f0": ["x"] * 10}), path)
    assert _problem(path) == f"{path}: column 'f0': type string is not numeric"


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = tmp_path / "data.parquet"
    path.write_bytes(b"PAR1")
    assert "pip install 'p2pfed[parquet]'" in _problem(path)


def _scenario(tmp_path, data_path, extra=""):
    sc = tmp_path / "own.yaml"
    sc.write_text(f"name: own\nrounds: 2\ndataset:\n  name: files\n  path: {data_path.name}\n{extra}"
                  "model:\n  hidden: [8]\ntopology:\n  kind: complete\n")
    return sc


def test_validate_and_run_refuse_a_malformed_csv(tmp_path, capsys):
    lines = _rows()
    lines[4] = "u1,walk,0.5,high\n"
    data = _csv(tmp_path, lines)
    sc = _scenario(tmp_path, data)
    assert main(["validate", str(sc)]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"{sc}: dataset.path: {data}: column 'f1': 'high' is not a number (line 6); every "
                   f"column but 'label' and 'device' must be numeric"]
    assert main(["run", str(sc), "--quiet", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"{data}: column 'f1': 'high' is not a number (line 6)" in err and "Traceback" not in err


def test_a_file_that_is_not_an_npz_is_named_with_the_field(tmp_path, capsys):
    data = tmp_path / "own.npz"
    data.write_bytes(b"x,label\n1,a\n")
    sc = _scenario(tmp_path, data)
    assert main(["validate", str(sc)]) == 2
    assert capsys.readouterr().out.strip().splitlines() == [
        f"{sc}: dataset.path: {data}: not an .npz file (an .npz is a zip archive of .npy arrays)"]


def test_validate_reads_a_good_file(tmp_path, capsys):
    sc = _scenario(tmp_path, _csv(tmp_path, _rows()))
    assert main(["validate", str(sc)]) == 0
    assert capsys.readouterr().out.strip() == f"{sc}: ok"


def test_impossible_partition_is_a_scenario_error(tmp_path):
    sc = _scenario(tmp_path, _csv(tmp_path, _rows()),
                   "  partition:\n    kind: iid\n    num_devices: 5\n    min_samples: 10\n")
    with pytest.raises(ScenarioError, match=r"own.yaml: dataset.partition: 24 samples cannot give 5 devices"):
        load_scenario(sc).federation


@pytest.mark.parametrize("overrides, expected", [
    (["dataset.name=digits"], "digits has no devices of its own"),
    (["dataset.partition.kind=iid"], "only 'natural' for dataset 'wisdm'"),
    (["dataset.name=files"], "dataset.path: is required for dataset 'files'"),
    (["dataset.name=digits", "dataset.partition.kind=iid", "dataset.label_column=device"],
     "dataset.label_column: must differ from dataset.device_column"),
])
def test_schema_refuses_inconsistent_dataset_keys(overrides, expected):
    with pytest.raises(ScenarioError, match=expected):
        load_scenario(None, overrides)


def test_example_scenario_runs(repo_root, tmp_path):
    from p2pfed.engine.runner import run_scenario

    loaded = load_scenario(repo_root / "scenarios" / "own-data-example.yaml", ["rounds=2"])
    data = loaded.federation
    assert len(data.devices) == 8 and data.class_names == ["alpha", "beta", "delta", "gamma"]
    assert (repo_root / "scenarios" / "data" / "own-data-example.csv").stat().st_size < 200_000
    summary = run_scenario(loaded, tmp_path, progress=False)
    assert summary["devices"] == 8 and 0 < summary["final"]["f1_macro_mean"] <= 1
    # The results say which split they were measured on: every device's examples per class.
    written = json.loads((tmp_path / "dataset.json").read_text())
    counts = written["class_counts"]
    assert list(counts) == [d.name for d in data.devices]
    assert [c["train"] for c in counts.values()] == data.class_counts("train").tolist()
    assert [c["test"] for c in counts.values()] == data.class_counts("test").tolist()


def test_digits_scenario_validates(repo_root):
    loaded = load_scenario(repo_root / "scenarios" / "digits-dirichlet.yaml")
    data = loaded.federation
    assert len(data.devices) == 50 and data.num_features == 64 and data.num_classes == 10
