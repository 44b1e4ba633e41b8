"""Up-front refusals: a run that would not fit in memory, a device that is not there."""

from __future__ import annotations

import pytest

from p2pfed.cli.main import main
from p2pfed.engine.footprint import BASE_BYTES, estimate_memory, memory_problem


def test_estimate_grows_with_devices_models_and_neighbours():
    small = estimate_memory(100, 100 * 50_000, 40_000, 41_000, 6)
    assert small.total_bytes == BASE_BYTES + small.batch_bytes + 100 * small.per_device_bytes
    assert estimate_memory(1000, 1000 * 50_000, 40_000, 41_000, 6).total_bytes > small.total_bytes
    assert estimate_memory(100, 100 * 50_000, 400_000, 410_000, 6).per_device_bytes > small.per_device_bytes
    assert estimate_memory(100, 100 * 50_000, 40_000, 41_000, 30).per_device_bytes > small.per_device_bytes


def test_problem_names_the_field_and_how_many_devices_fit():
    est = estimate_memory(10_000, 10_000 * 50_000, 40_000, 41_000, 6)
    assert memory_problem(est, est.total_bytes, limit_field="x", devices_field="d") is None
    limit = BASE_BYTES + est.batch_bytes + 500 * est.per_device_bytes
    line = memory_problem(est, limit, limit_field="engine.max_memory_gib",
                          devices_field="dataset.synthetic.num_devices")
    assert line.startswith("dataset.synthetic.num_devices: the run needs about")
    assert "engine.max_memory_gib" in line and "about 500 devices fit" in line


def test_cli_refuses_a_run_over_the_memory_limit_before_building_models(repo_root, tmp_path, capsys):
    code = main(["run", str(repo_root / "scenarios" / "synthetic-small.yaml"), "--quiet",
                 "--out", str(tmp_path / "out"), "--set", "dataset.synthetic.num_devices=1000",
                 "--set", "dataset.synthetic.samples_per_class=4", "--set", "engine.max_memory_gib=1"])
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("running ")]
    assert code == 2
    assert len(err) == 1, err
    assert "synthetic-small.yaml: dataset.synthetic.num_devices: the run needs about" in err[0]
    assert "for 1000 devices" in err[0] and "engine.max_memory_gib" in err[0]
    assert not (tmp_path / "out").exists()


def test_a_run_within_the_limit_goes_ahead(repo_root, tmp_path):
    assert main(["run", str(repo_root / "scenarios" / "synthetic-small.yaml"), "--quiet",
                 "--out", str(tmp_path / "out"), "--set", "rounds=2", "--set", "engine.max_memory_gib=4",
                 "--set", "engine.device=auto"]) == 0


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal on a CPU-only machine")
def test_cuda_on_a_machine_without_a_gpu_is_refused_in_one_line(repo_root, capsys):
    code = main(["run", str(repo_root / "scenarios" / "synthetic-small.yaml"), "--quiet",
                 "--set", "engine.device=cuda"])
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("running ")]
    assert code == 2 and len(err) == 1
    assert "engine.device: cuda requested but no CUDA GPU is visible" in err[0]


def test_training_copies_count_once_per_batch_not_per_device():
    """The runtime trains at most ``GROUP_LIMIT`` models at once: their stacked copies are a
    fixed cost past that size, not a cost of every device."""
    from p2pfed.engine.footprint import TRAINING_COPIES
    from p2pfed.learning.batched_training import GROUP_LIMIT
    small, large = (estimate_memory(n, n * 50_000, 40_000, 41_000, 6) for n in (100, 20 * GROUP_LIMIT))
    assert small.batch_bytes == TRAINING_COPIES * 40_000 * 100
    assert large.batch_bytes == TRAINING_COPIES * 40_000 * GROUP_LIMIT
    assert large.per_device_bytes == small.per_device_bytes
