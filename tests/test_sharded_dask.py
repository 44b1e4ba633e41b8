"""Every shipped method split over two Dask worker processes (a local scheduler) writes the
results files one process writes: rounds.csv and devices.csv byte for byte, batching off."""

from pathlib import Path

import pytest

from p2pfed.algorithms.registry import ALGORITHMS
from p2pfed.engine.runner import run_scenario
from p2pfed.scenario.loader import load_mapping

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.slow

# methods whose schedule needs more than two rounds, or an option for two
NEEDS = {"fedclar": {"rounds": 3, "algorithm": {"cluster_round": 0}}, "safl": {"algorithm": {"target_rate": 0.1}}}


@pytest.fixture(scope="module")
def scheduler():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def scenario(method: str, **engine) -> dict:
    extra = NEEDS.get(method, {})
    return {"rounds": extra.get("rounds", 2), "topology": {"kind": "ring"}, "model": {"hidden": [8]},
            "dataset": {"name": "synthetic", "synthetic": {"num_devices": 6}},
            "engine": {"batched_training": False, **engine},
            "algorithm": {"name": method, **extra.get("algorithm", {})}}


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_two_dask_workers_write_one_process_results(method, scheduler, tmp_path):
    run_scenario(load_mapping(scenario(method), "<test>", Path.cwd()), tmp_path / "one", progress=False)
    summary = run_scenario(load_mapping(scenario(method, shards=2, scheduler=scheduler), "<test>", Path.cwd()),
                           tmp_path / "two", progress=False)
    assert summary is not None
    # on a ring halved, any method that sends sends across
    assert (summary["sharding"]["messages_across_per_round"] > 0) == (summary["comm"]["messages_sent"] > 0)
    for name in ("rounds.csv", "devices.csv"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name


def test_dask_shards_stopped_after_a_checkpoint_resume_to_one_process_results(scheduler, tmp_path):
    """Each worker writes its shard's checkpoint file; a later run resumes from them."""
    from p2pfed.engine.runner import Checkpointing

    raw = scenario("fedsub", shards=2, scheduler=scheduler)
    raw["rounds"] = 3
    run_scenario(load_mapping({**raw, "engine": {"batched_training": False}}, "<test>", Path.cwd()),
                 tmp_path / "one", progress=False)
    path = tmp_path / "two" / "checkpoint.pt"
    path.parent.mkdir()
    stopped = run_scenario(load_mapping(raw, "<test>", Path.cwd()), tmp_path / "two", progress=False,
                           checkpointing=Checkpointing(path, stop_after_round=2))
    assert stopped is None and (tmp_path / "two" / "checkpoint.pt.shard1-round2").exists()
    assert not (tmp_path / "two" / "rounds.csv").exists()
    run_scenario(load_mapping(raw, "<test>", Path.cwd()), tmp_path / "two", progress=False,
                 checkpointing=Checkpointing(path))
    for name in ("rounds.csv", "devices.csv"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
