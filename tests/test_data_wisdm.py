"""Tests for the WISDM loaders, the ARFF parser, splitting and scaling."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from p2pfed.data import load_dataset, load_wisdm, load_wisdm_raw
from p2pfed.data.arff import read_arff
from p2pfed.data.build_wisdm import build
from p2pfed.data.scaling import preprocess
from p2pfed.data.split import stratified_split
from p2pfed.data.wisdm_arrays import CLASS_NAMES, arrays_from_npz

ARFF = Path("/work/shared/data/wisdm/WISDM_ar_v1.1_transformed.arff")
PACKAGED = Path(__file__).parents[1] / "p2pfed/data/files/wisdm_v1.1_transformed.npz"
needs_arff = pytest.mark.skipif(not ARFF.exists(), reason="source ARFF not available")


@pytest.fixture(scope="module")
def wisdm():
    return load_wisdm()


def _count_valid_arff_lines(path: Path) -> int:
    """Independent count: data lines with 46 fields whose last is a known class."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().lower() == "@data")
    return sum(1 for line in lines[start + 1:]
               if len(line.split(",")) == 46 and line.split(",")[-1].strip() in CLASS_NAMES)


def test_packaged_wisdm_shape(wisdm):
    assert len(wisdm.devices) == 36
    assert wisdm.num_features == 43 and wisdm.num_classes == 6
    assert wisdm.class_names == list(CLASS_NAMES)
    assert [d.name for d in wisdm.devices] == [f"wisdm-user-{u}" for u in range(1, 37)]
    assert [d.device_id for d in wisdm.devices] == list(range(36))
    for dev in wisdm.devices:
        assert dev.x_train.dtype == np.float32 and dev.y_train.dtype == np.int64
        assert dev.x_train.shape[1] == 43
        assert not np.isnan(dev.x_train).any() and not np.isnan(dev.x_test).any()


@needs_arff
def test_packaged_count_matches_arff(wisdm):
    total = sum(d.num_train + d.num_test for d in wisdm.devices)
    assert total == _count_valid_arff_lines(ARFF)


@needs_arff
def test_packaged_npz_is_regenerated_from_arff(tmp_path):
    packaged = load_wisdm(scaling="none")
    rebuilt = arrays_from_npz(build(ARFF, tmp_path / "w.npz"))
    fresh = load_wisdm(scaling="none", path=tmp_path / "w.npz")
    direct = load_wisdm(scaling="none", path=ARFF)
    assert rebuilt["x"].dtype == np.float32 and rebuilt["label"].dtype == np.int8
    for a, b, c in zip(packaged.devices, fresh.devices, direct.devices):
        np.testing.assert_array_equal(a.x_train, b.x_train)
        np.testing.assert_array_equal(a.x_test, c.x_test)


def test_split_is_stratified_and_disjoint():
    arrays = arrays_from_npz(PACKAGED)
    for user in np.unique(arrays["user"]):
        y = arrays["label"][arrays["user"] == user]
        train, test = stratified_split(y, 0.2, seed=0)
        assert len(np.intersect1d(train, test)) == 0
        np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(len(y)))
        assert abs(len(test) - 0.2 * len(y)) <= 1
        for c in np.unique(y):
            n_c = np.sum(y == c)
            assert abs(np.sum(y[test] == c) - 0.2 * n_c) <= 1


def test_singleton_class_goes_to_train():
    y = np.array([0, 0, 0, 0, 0, 1, 2, 2])
    train, test = stratified_split(y, 0.2, seed=3)
    assert 5 in train and 5 not in test
    train, test = stratified_split(np.array([4]), 0.5, seed=0)
    assert list(train) == [0] and len(test) == 0


def test_split_deterministic_per_seed():
    a, b, c = load_wisdm(seed=1), load_wisdm(seed=1), load_wisdm(seed=2)
    for da, db in zip(a.devices, b.devices):
        np.testing.assert_array_equal(da.x_test, db.x_test)
    assert any(not np.array_equal(da.y_test, dc.y_test) or not np.array_equal(da.x_test, dc.x_test)
               for da, dc in zip(a.devices, c.devices))


def test_device_scaling_uses_train_statistics(wisdm):
    # Columns with missing values are imputed with the mean, which shrinks
    # their std below 1; check the complete columns only.
    arrays = arrays_from_npz(PACKAGED)
    complete = ~np.isnan(arrays["x"]).any(axis=0)
    assert complete.sum() >= 40
    for dev in wisdm.devices:
        np.testing.assert_allclose(dev.x_train.mean(axis=0), 0.0, atol=1e-4)
        std = dev.x_train.std(axis=0)
        varying = (std > 1e-3) & complete
        np.testing.assert_allclose(std[varying], 1.0, atol=1e-3)


def test_changing_test_data_does_not_change_train():
    rng = np.random.default_rng(0)
    x_train, x_test = rng.normal(3, 2, (30, 5)), rng.normal(3, 2, (8, 5))
    x_train[0, 2] = np.nan
    x_test[1, 4] = np.nan
    tr1, te1 = preprocess(x_train, x_test)
    altered = x_test.copy()
    altered[0] += 1000.0
    tr2, _ = preprocess(x_train, altered)
    np.testing.assert_array_equal(tr1, tr2)
    mean, std = np.nanmean(x_train, axis=0), np.nanstd(x_train, axis=0)
    np.testing.assert_allclose(te1[0], (x_test[0] - mean) / std, rtol=1e-5)
    assert te1[1, 4] == pytest.approx(0.0, abs=1e-6)  # imputed with the train mean
    const = np.ones((4, 2))
    tr, _ = preprocess(const, const)
    assert np.isfinite(tr).all()
    tr_none, _ = preprocess(x_train, x_test, scaling="none")
    np.testing.assert_allclose(tr_none[1:], x_train[1:], rtol=1e-6)
    with pytest.raises(ValueError, match="scaling"):
        preprocess(x_train, x_test, scaling="global")


def test_user_subset_and_unknown_user(wisdm):
    sub = load_wisdm(users=[7, 3])
    assert [d.name for d in sub.devices] == ["wisdm-user-3", "wisdm-user-7"]
    np.testing.assert_array_equal(sub.devices[0].x_test, wisdm.devices[2].x_test)
    with pytest.raises(ValueError, match="99"):
        load_wisdm(users=[3, 99])


def test_summary_table_lists_devices_and_totals(wisdm):
    table = wisdm.summary_table()
    assert all(name in table for name in CLASS_NAMES)
    total = sum(d.num_train for d in wisdm.devices)
    assert f"{total}/" in table.splitlines()[-1]
    assert len(table.splitlines()) == len(wisdm.devices) + 3


def test_arff_parser_skips_and_reports_bad_lines(tmp_path):
    path = tmp_path / "small.arff"
    path.write_text(
        "@relation t\n\n"
        "@attribute \"a\" numeric\n"
        "@attribute b numeric\n"
        "@attribute class{ \"Walking\" , \"Sitting\" }\n\n"
        "@data\n"
        "1,2,Walking\n"        # line 8
        "1,2\n"                # line 9: too few fields
        "\n"                   # line 10: empty
        "x,2,Sitting\n"        # line 11: non-numeric
        "3,?,Sitting\n"        # line 12: missing value
        "4,5,Running\n"        # line 13: undeclared class
        "% comment\n")
    with pytest.warns(UserWarning, match=r"line 9\b") as record:
        table = read_arff(path)
    message = str(record[0].message)
    assert all(f"line {n}" in message for n in (9, 10, 11, 13))
    assert [n for n, _ in table.skipped] == [9, 10, 11, 13]
    assert list(table.line_numbers) == [8, 12]
    assert np.isnan(table.columns["b"][1])
    assert list(table.columns["class"]) == ["Walking", "Sitting"]


def _write_raw(path: Path, rng: np.random.Generator) -> dict:
    """Write a raw file; return expected window means per (user, label)."""
    sizes = {(1, "Walking"): 45, (1, "jogging"): 20, (2, "SITTING"): 41, (2, "Upstairs"): 19}
    lines, expected = [], {}
    for (user, activity), n in sizes.items():
        ts = rng.permutation(np.arange(n) * 50_000_000 + 1000)
        xyz = rng.normal(size=(n, 3))
        order = np.argsort(ts)
        full = (n // 20) * 20
        xyz = np.round(xyz, 6)  # the file holds 6 decimals
        lines += [f"{user},{activity},{t},{a:.6f},{b:.6f},{c:.6f};" for t, (a, b, c) in zip(ts, xyz)]
        expected[(user, activity.lower())] = xyz[order][:full].reshape(-1, 20, 3).mean(axis=1)
    lines.insert(3, "")
    lines.insert(10, "1,Walking,123,not-a-number,0.1,0.2;")
    path.write_text("\n".join(lines) + "\n")
    return expected


def test_raw_loader_windows(tmp_path):
    path = tmp_path / "raw.txt"
    expected = _write_raw(path, np.random.default_rng(5))
    with pytest.warns(UserWarning) as record:
        data = load_wisdm_raw(path, scaling="none", test_fraction=0.2, seed=0)
    message = " ".join(str(r.message) for r in record)
    assert "line 4" in message and "line 11" in message
    assert data.num_features == 3 and [d.name for d in data.devices] == ["wisdm-user-1", "wisdm-user-2"]
    total = sum(d.num_train + d.num_test for d in data.devices)
    assert total == sum(len(v) for v in expected.values())
    for dev, user in zip(data.devices, (1, 2)):
        x = np.concatenate([dev.x_train, dev.x_test])
        y = np.concatenate([dev.y_train, dev.y_test])
        for (u, activity), means in expected.items():
            if u != user:
                continue
            got = x[y == CLASS_NAMES.index(activity.capitalize())]
            key = lambda m: np.lexsort(m.T[::-1])  # noqa: E731
            np.testing.assert_allclose(got[key(got)], means[key(means)], atol=1e-5)


def test_load_dataset_dispatch(tmp_path):
    with pytest.raises(ValueError, match="synthetic"):
        load_dataset("mnist")
    with pytest.raises(ValueError, match="path"):
        load_dataset("wisdm-raw")
    assert len(load_dataset("wisdm", users=[1]).devices) == 1
    assert load_dataset("synthetic", num_devices=3).groups.shape[0] == 3


def test_train_fraction_keeps_a_share_of_every_class_and_the_same_test_set(wisdm):
    """The data-fraction experiments need less training data per device, nothing else changed:
    the same test examples, the same classes, about the asked share of each class."""
    quarter = load_wisdm(train_fraction=0.25)
    for full, cut in zip(wisdm.devices, quarter.devices):
        assert np.array_equal(full.y_test, cut.y_test)
        classes, counts = np.unique(full.y_train, return_counts=True)
        cut_classes, cut_counts = np.unique(cut.y_train, return_counts=True)
        assert np.array_equal(classes, cut_classes)
        assert np.array_equal(cut_counts, np.maximum(1, np.round(counts * 0.25)).astype(int))
    assert sum(d.num_train for d in quarter.devices) < 0.3 * sum(d.num_train for d in wisdm.devices)


def test_train_fraction_is_a_scenario_key_seen_in_the_run(tmp_path):
    from p2pfed.scenario.loader import load_scenario

    full = load_scenario(None).federation
    tenth = load_scenario(None, ["dataset.train_fraction=0.1"]).federation
    assert sum(d.num_train for d in tenth.devices) < 0.15 * sum(d.num_train for d in full.devices)
    with pytest.raises(Exception, match="train_fraction"):
        load_scenario(None, ["dataset.train_fraction=0"])


AXIS_MEANS = ["XAVG", "YAVG", "ZAVG"]


@pytest.mark.parametrize("features", [None, AXIS_MEANS])
def test_federation_scaling_is_a_standard_scaler_fitted_on_the_pooled_training_data(features):
    """dataset.scaling=federation: one transform for every device, the pooled training splits'
    mean and std (summed from per-device counts, sums and sums of squares), as scikit-learn's
    StandardScaler fitted on those splits together gives it."""
    from sklearn.preprocessing import StandardScaler

    imputed = load_wisdm(scaling="none", features=features, test_fraction=0.3)
    fed = load_wisdm(scaling="federation", features=features, test_fraction=0.3)
    pooled = np.concatenate([d.x_train for d in imputed.devices]).astype(np.float64)
    scaler = StandardScaler().fit(pooled)
    for raw, dev in zip(imputed.devices, fed.devices):
        assert np.array_equal(raw.y_train, dev.y_train) and np.array_equal(raw.y_test, dev.y_test)
        assert dev.x_train.dtype == np.float32
        np.testing.assert_allclose(dev.x_train, scaler.transform(raw.x_train), atol=1e-5)
        np.testing.assert_allclose(dev.x_test, scaler.transform(raw.x_test), atol=1e-5)
    scaled = np.concatenate([d.x_train for d in fed.devices]).astype(np.float64)
    np.testing.assert_allclose(scaled.mean(axis=0), 0.0, atol=1e-5)
    varying = pooled.std(axis=0) > 0   # XAVG is 0 in every line of the published file: stays 0
    assert varying.sum() == scaled.shape[1] - 1
    np.testing.assert_allclose(scaled.std(axis=0)[varying], 1.0, atol=1e-5)
    np.testing.assert_array_equal(scaled[:, ~varying], 0.0)
    # Not each device's own statistics: per device, the means stay apart from 0.
    assert max(np.abs(d.x_train.mean(axis=0)).max() for d in fed.devices) > 0.5


def test_federation_statistics_are_summed_per_device():
    from sklearn.preprocessing import StandardScaler

    from p2pfed.data.scaling import federation_statistics, sufficient_statistics

    rng = np.random.default_rng(1)
    parts = [rng.normal(loc, scale, (n, 4)) for loc, scale, n in [(5, 1, 7), (-3, 4, 30), (100, 0.5, 2)]]
    parts.append(np.full((3, 4), 9.0))
    mean, std = federation_statistics(parts)
    scaler = StandardScaler().fit(np.concatenate(parts))
    np.testing.assert_allclose(mean, scaler.mean_, rtol=1e-12)
    np.testing.assert_allclose(std, scaler.scale_, rtol=1e-9)
    n, total, squares = sufficient_statistics(parts[0])
    assert n == 7 and total.shape == squares.shape == (4,)
    _, const_std = federation_statistics([np.full((5, 2), 1e4)])
    assert np.array_equal(const_std, [1.0, 1.0])   # a constant feature is not blown up
    with pytest.raises(ValueError, match="federation"):
        preprocess(parts[0], parts[1], scaling="federation")   # one device cannot fit it alone


@pytest.mark.parametrize("make", ["owners", "parts"])
def test_federation_scaling_never_sees_test_data(make):
    """Changing every device's test rows changes neither any training split nor the statistics
    the test rows are scaled with."""
    from p2pfed.data.devices import devices_by_owner, devices_from_parts

    rng = np.random.default_rng(2)
    n = 120
    x = np.column_stack([rng.normal(3, 2, (n, 3)), np.arange(n, dtype=float)])  # last: row id
    y = np.tile(np.arange(3), n // 3)
    owner = np.repeat(np.arange(4), n // 4)

    def load(x, scaling):
        if make == "owners":
            return devices_by_owner(x, y, owner, [0, 1, 2, 3], "d{}", test_fraction=0.25, seed=5,
                                    scaling=scaling)
        parts = [np.flatnonzero(owner == k) for k in range(4)]
        return devices_from_parts(x, y, parts, ["a", "b", "c", "d"], test_fraction=0.25, seed=5,
                                  scaling=scaling)

    unscaled = load(x, "none")
    test_rows = np.concatenate([d.x_test[:, -1] for d in unscaled]).astype(int)
    assert len(test_rows) > 0
    train_std = np.concatenate([d.x_train for d in unscaled])[:, :3].std(axis=0)
    altered = x.copy()
    altered[test_rows, :3] += 1000.0
    before, after = load(x, "federation"), load(altered, "federation")
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a.x_train, b.x_train)
        shift = b.x_test[:, :3] - a.x_test[:, :3]   # the same mean and std scale both
        np.testing.assert_allclose(shift, np.broadcast_to(1000.0 / train_std, shift.shape), rtol=1e-4)


def test_features_keep_the_named_columns_in_order():
    full = load_wisdm(scaling="none")
    names = list(arrays_from_npz(PACKAGED)["feature_names"])
    axes = load_wisdm(scaling="none", features=["ZAVG", "XAVG", "YAVG"])
    assert axes.num_features == 3
    columns = [names.index(f) for f in ("ZAVG", "XAVG", "YAVG")]
    for a, b in zip(full.devices, axes.devices):
        np.testing.assert_array_equal(b.x_train, a.x_train[:, columns])
        np.testing.assert_array_equal(b.x_test, a.x_test[:, columns])
    with pytest.raises(ValueError, match="unknown WISDM feature.*'XMEAN'.*available: X0"):
        load_wisdm(features=["XAVG", "XMEAN"])
    with pytest.raises(ValueError, match="twice"):
        load_wisdm(features=["XAVG", "XAVG"])


def test_paperlike_scenario_has_the_journals_3_inputs(repo_root, capsys):
    from p2pfed.cli.main import main
    from p2pfed.scenario.budget import model_parameters
    from p2pfed.scenario.build import build_device_model
    from p2pfed.scenario.loader import load_scenario
    from p2pfed.scenario.errors import ScenarioError

    path = repo_root / "scenarios" / "wisdm-paperlike.yaml"
    loaded = load_scenario(path)
    assert loaded.scenario.dataset.features == AXIS_MEANS
    data = loaded.federation
    assert data.num_features == 3 and len(data.devices) == 36
    assert all(d.x_train.shape[1] == d.x_test.shape[1] == 3 for d in data.devices)
    assert sum(d.num_train + d.num_test for d in data.devices) == 5418
    assert all((d.x_train[:, 0] == 0).all() for d in data.devices)   # XAVG: 0 in the published file
    model = build_device_model(loaded, data.num_features, data.num_classes)
    assert sum(p.numel() for p in model.parameters()) == model_parameters(loaded.scenario)
    fed = load_scenario(path, ["dataset.scaling=federation"]).federation
    assert fed.num_features == 3
    assert main(["validate", str(path), "--set", "dataset.features=[XAVG,XMEAN]"]) == 2
    assert "dataset.features: unknown WISDM feature(s) ['XMEAN']" in capsys.readouterr().out
    with pytest.raises(ScenarioError, match="dataset.features: chooses columns of the WISDM"):
        load_scenario(None, ["dataset.name=synthetic", "dataset.features=[XAVG]"])
