"""Optional packages: a run needs none of them, and what needs one names the extra to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from p2pfed.cli.main import EXIT_BAD_INPUT, main
from p2pfed.extras import MissingExtra

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL = ("distributed", "dask", "imblearn", "tensorboard")


def without(monkeypatch, *modules: str) -> None:
    """Make ``import module`` fail here, as if the package were not installed."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_a_run_needs_no_optional_package(tmp_path):
    # A fresh process, the optional packages blocked before p2pfed is first imported.
    blocked = "; ".join(f"sys.modules[{m!r}] = None" for m in OPTIONAL)
    code = (f"import sys; {blocked}\n"
            "from p2pfed.cli.main import main\n"
            f"sys.exit(main(['run', {str(ROOT / 'scenarios' / 'synthetic-small.yaml')!r}, '--quiet',"
            f" '--set', 'rounds=1', '--out', {str(tmp_path / 'run')!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "summary.json").is_file()


def test_a_sweep_without_dask_names_the_extra(monkeypatch, tmp_path, capsys):
    without(monkeypatch, "distributed")
    rc = main(["sweep", str(ROOT / "sweeps" / "adversaries.yaml"), "--out", str(tmp_path / "s"), "--quiet"])
    assert rc == 2
    assert capsys.readouterr().err == "p2pfed: error: p2pfed sweep needs Dask: pip install 'p2pfed[sweeps]'\n"
    assert not (tmp_path / "s").exists()


def test_tensorboard_logging_without_tensorboard_names_the_extra(monkeypatch, tmp_path, capsys):
    without(monkeypatch, "tensorboard", "torch.utils.tensorboard")
    rc = main(["run", str(ROOT / "scenarios" / "synthetic-small.yaml"), "--quiet", "--set", "rounds=1",
               "--out", str(tmp_path / "run"), "--log", f"tensorboard:{tmp_path / 'tb'}"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("p2pfed: error: --log tensorboard needs TensorBoard: "
                                    "pip install 'p2pfed[tensorboard]'")
    assert "Traceback" not in err


def test_smote_balancing_without_imbalanced_learn_names_the_extra(monkeypatch):
    from p2pfed.algorithms.averaging.balancing import smote_balance

    without(monkeypatch, "imblearn", "imblearn.over_sampling")
    x, y = np.random.default_rng(0).normal(size=(9, 3)), np.array([0] * 6 + [1] * 3)
    with pytest.raises(MissingExtra, match=r"^fedhome needs imbalanced-learn: pip install 'p2pfed\[smote\]'$"):
        smote_balance(x, y, k_neighbors=2, seed=0)


def test_validating_a_fedhome_run_without_imbalanced_learn_names_the_extra(monkeypatch, capsys):
    without(monkeypatch, "imblearn", "imblearn.over_sampling")
    scenario = str(ROOT / "scenarios" / "synthetic-small.yaml")
    assert main(["validate", scenario, "--set", "algorithm.name=fedhome"]) == EXIT_BAD_INPUT
    assert capsys.readouterr().out == (f"{scenario}: algorithm.name: fedhome needs imbalanced-learn: "
                                       "pip install 'p2pfed[smote]'\n")
    # without the fine-tune FedHome draws no SMOTE samples, so it needs no imbalanced-learn
    assert main(["validate", scenario, "--set", "algorithm.name=fedhome", "--set", "algorithm.fine_tune_rounds=0"]) == 0
    assert capsys.readouterr().out == f"{scenario}: ok\n"
