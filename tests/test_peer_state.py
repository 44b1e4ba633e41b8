"""A peer's own data files and the peer file reference (checkpoints: test_state.py)."""

from __future__ import annotations

import numpy as np
import pytest

from p2pfed.peer.data import DataFileError, load_own_data


def test_own_npz_and_csv_data_fit_the_model_or_fail_naming_the_file(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 16)).astype(np.float32), np.repeat(np.arange(4), 10)
    npz = tmp_path / "mine.npz"
    np.savez(npz, x_train=x[:30], y_train=y[:30], x_test=x[30:], y_test=y[30:])
    d = load_own_data(npz, 5, num_features=16, num_classes=4, test_fraction=0.2, seed=0)
    assert (d.device_id, d.num_train, d.num_test, d.x_train.dtype) == (5, 30, 10, np.float32)
    csv = tmp_path / "mine.csv"
    csv.write_text("f" + ",f".join(map(str, range(15))) + ",label\n"
                   + "\n".join(",".join(map(str, row)) + f",{lab}" for row, lab in zip(x, y)))
    d = load_own_data(csv, 5, num_features=16, num_classes=4, test_fraction=0.25, seed=0)
    assert d.num_train + d.num_test == 40 and set(d.y_test) == {0, 1, 2, 3}
    with pytest.raises(DataFileError,
                       match=r"mine.npz: train features have shape \(30, 16\), the model needs \(n, 8\)"):
        load_own_data(npz, 5, num_features=8, num_classes=4, test_fraction=0.2, seed=0)
    with pytest.raises(DataFileError, match="mine.csv: all labels must be class ids in 0..2"):
        load_own_data(csv, 5, num_features=16, num_classes=3, test_fraction=0.2, seed=0)
    np.savez(npz, x_train=np.array([object()], dtype=object))
    with pytest.raises(DataFileError, match="mine.npz"):
        load_own_data(npz, 5, num_features=16, num_classes=4, test_fraction=0.2, seed=0)
