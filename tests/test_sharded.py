"""A run split into shards (``engine.shards``) without Dask: the partition by the graph, messages
routed between shards, checkpoints per shard, all against the one-process run."""

from pathlib import Path

import networkx as nx
import pandas as pd
import pytest

from p2pfed.engine.partition import cut_edges, partition_graph
from p2pfed.engine.runner import Checkpointing, simulate, simulate_sharded
from p2pfed.engine.sharded import local_shards
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.loader import load_mapping


def tiny(method: str = "gossip-avg", shards: int = 1, **engine) -> dict:
    return {"rounds": 3, "topology": {"kind": "ring"}, "model": {"hidden": [8]},
            "dataset": {"name": "synthetic", "synthetic": {"num_devices": 6}},
            "engine": {"batched_training": False, "shards": shards, **engine}, "algorithm": {"name": method}}


def spec(raw: dict):
    return load_mapping(raw, "<test>", Path.cwd())


def figures(done) -> tuple[pd.DataFrame, list]:
    """rounds.csv's rows and devices.csv's evaluations of a run."""
    return pd.DataFrame(done.recorder.rows), [vars(e) for e in done.recorder.last_evaluations]


def test_partition_keeps_communities_together_and_shards_balanced():
    graph = nx.connected_caveman_graph(4, 6)   # four 6-cliques in a ring, one edge between neighbours
    nodes = list(graph.nodes)
    shuffled = nx.relabel_nodes(graph, dict(zip(nodes, reversed(nodes))))
    parts = partition_graph(shuffled, 4, seed=1)
    assert sorted(d for p in parts for d in p) == nodes
    assert [len(p) for p in parts] == [6, 6, 6, 6]
    assert cut_edges(shuffled, parts) == 4     # only the ring's links between cliques are cut
    assert partition_graph(shuffled, 4, seed=1) == parts
    assert [len(p) for p in partition_graph(nx.random_regular_graph(4, 50, seed=0), 3)] == [17, 17, 16]
    with pytest.raises(ValueError, match="engine.shards"):
        partition_graph(graph, 25)


def test_shards_equal_one_process_bit_for_bit_and_count_what_crosses():
    one = simulate(spec(tiny()), progress=False)
    two = simulate_sharded(spec(tiny(shards=2)), progress=False, shards=local_shards)
    assert two is not None and one is not None
    rows, devices = figures(two)
    assert rows.equals(figures(one)[0]) and devices == figures(one)[1]
    sharding = two.summary["sharding"]
    assert sharding["devices_per_shard"] == [3, 3]
    # a ring of six in two halves: two edges cut, one message each way on each per round
    assert sharding["messages_across_per_round"] == 4
    per_message = one.summary["comm"]["bytes_sent_total"] / one.summary["comm"]["messages_sent"]
    assert sharding["bytes_across_per_round"] == pytest.approx(4 * per_message)
    three = simulate_sharded(spec(tiny(shards=3)), progress=False, shards=local_shards)
    assert three is not None and figures(three)[0].equals(rows)


@pytest.mark.parametrize("section, values", [
    ("engine", {"participation": 0.5}),
    ("security", {"sign_artifacts": True}),
    ("adversaries", [{"kind": "label-flip", "fraction": 0.3, "source_class": 0, "target_class": 1}]),
    ("dynamic", {"devices_fraction": 0.5, "return_every": 1}),
    ("topology", {"kind": "small-world", "k": 2, "p": 0.3, "latency_s": 40.0}),   # arrivals a round late
    ("evaluation", {"generalization": True, "every": 2}),
])
def test_three_shards_equal_one_process_whatever_the_scenario_adds(section, values):
    one_raw, three_raw = tiny("fedsub"), tiny("fedsub", shards=3)
    for raw in (one_raw, three_raw):
        raw[section] = {**raw.get(section, {}), **values} if isinstance(values, dict) else values
    one = simulate(spec(one_raw), progress=False)
    three = simulate_sharded(spec(three_raw), progress=False, shards=local_shards)
    assert one is not None and three is not None
    assert figures(three)[0].equals(figures(one)[0]) and figures(three)[1] == figures(one)[1]
    for key in ("comm", "adversaries", "dynamic"):
        assert three.summary.get(key) == one.summary.get(key), key


def test_a_share_crosses_once_to_each_shard_however_many_of_its_devices_receive_it():
    raw = tiny(shards=2)
    raw["topology"] = {"kind": "complete"}
    raw["dataset"]["synthetic"]["num_devices"] = 4
    one = simulate(spec({**raw, "engine": {"batched_training": False}}), progress=False)
    two = simulate_sharded(spec(raw), progress=False, shards=local_shards)
    assert one is not None and two is not None and figures(two)[0].equals(figures(one)[0])
    # each device's share goes to both devices of the other shard: four shares cross per round, not eight
    assert two.summary["sharding"]["messages_across_per_round"] == 4
    per_message = one.summary["comm"]["bytes_sent_total"] / one.summary["comm"]["messages_sent"]
    assert two.summary["sharding"]["bytes_across_per_round"] == pytest.approx(4 * per_message)


def test_batched_shards_equal_one_process_up_to_float_rounding():
    one = simulate(spec(tiny("fedsub", batched_training=True)), progress=False)
    two = simulate_sharded(spec(tiny("fedsub", shards=2, batched_training=True)), progress=False, shards=local_shards)
    assert two is not None and one is not None
    pd.testing.assert_frame_equal(figures(two)[0], figures(one)[0], rtol=1e-5)


def test_sharded_run_stopped_after_a_checkpoint_resumes_to_the_same_figures(tmp_path):
    whole = simulate_sharded(spec(tiny(shards=2)), progress=False, shards=local_shards)
    path = tmp_path / "run.ckpt"
    stopped = simulate_sharded(spec(tiny(shards=2)), progress=False, shards=local_shards,
                               checkpointing=Checkpointing(path, every=1, stop_after_round=1))
    assert stopped is None
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["run.ckpt", "run.ckpt.shard0-round1", "run.ckpt.shard1-round1"]
    resumed = simulate_sharded(spec(tiny(shards=2)), progress=False, shards=local_shards,
                               checkpointing=Checkpointing(path, every=1))
    assert resumed is not None and whole is not None
    assert figures(resumed)[0].equals(figures(whole)[0]) and figures(resumed)[1] == figures(whole)[1]
    # the files of the last two checkpoints stay, older ones go
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["run.ckpt", "run.ckpt.shard0-round2", "run.ckpt.shard0-round3", "run.ckpt.shard1-round2",
                     "run.ckpt.shard1-round3"]


def test_shards_need_synchronous_rounds():
    raw = tiny(shards=2)
    raw["contacts"] = {"kind": "static", "duration_s": 100}
    with pytest.raises(ScenarioError, match="engine.shards"):
        spec(raw)
