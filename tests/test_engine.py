"""The synchronous SimPy engine and its topologies: timing of links, graphs from files."""

import networkx as nx
import numpy as np
import pytest

from p2pfed.engine.simulation import RoundSchedule, Simulation
from p2pfed.network.topology import TopologyError, build_topology
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import build_algorithms
from p2pfed.scenario.loader import load_scenario


@pytest.mark.parametrize("kind,extra", [("complete", {}), ("ring", {}), ("erdos-renyi", {"p": 0.3}),
                                        ("small-world", {"k": 4, "p": 0.2}),
                                        ("random-regular", {"degree": 3})])
def test_generated_topologies_are_connected_with_link_attributes(kind, extra):
    g = build_topology(kind, 12, seed=1, bandwidth_bps=2e6, latency_s=0.1, **extra)
    assert sorted(g.nodes) == list(range(12)) and nx.is_connected(g)
    assert all(d["bandwidth_bps"] == 2e6 and d["latency_s"] == 0.1 for _, _, d in g.edges(data=True))
    if kind == "random-regular":
        assert {d for _, d in g.degree} == {3}


def test_topology_files_edge_list_and_graphml(repo_root):
    g = build_topology("file", 36, seed=0, file=repo_root / "topologies" / "wisdm36-smallworld.edgelist")
    assert g.number_of_nodes() == 36 and nx.is_connected(g)
    assert {d["bandwidth_bps"] for _, _, d in g.edges(data=True)} == {1e6}
    h = build_topology("file", 12, seed=0, file=repo_root / "topologies" / "scale-free-12.graphml",
                       bandwidth_bps=5.0)
    assert {d["bandwidth_bps"] for _, _, d in h.edges(data=True)} == {2e6}  # the file's value wins


def test_topology_file_with_wrong_node_count_names_the_file(tmp_path):
    f = tmp_path / "three.edgelist"
    f.write_text("# a triangle\na b\nb c\nc a\n")
    with pytest.raises(TopologyError, match=r"three\.edgelist: has 3 nodes but the scenario has 4"):
        build_topology("file", 4, seed=0, file=f)
    assert build_topology("file", 3, seed=0, file=f).number_of_edges() == 3


def test_impossible_random_regular_is_explained():
    with pytest.raises(TopologyError, match="degree=3 impossible for 5 devices"):
        build_topology("random-regular", 5, seed=0, degree=3)


def _two_device_sim(repo_root, bandwidth_bps, latency_s, period):
    loaded = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml",
                           ["algorithm.name=gossip-avg", "dataset.synthetic.num_devices=2",
                            "model.hidden=[64]", "rounds=1"])
    dataset = loaded.federation
    algos = build_algorithms(loaded, dataset)
    g = nx.Graph()
    g.add_edge(0, 1, bandwidth_bps=bandwidth_bps, latency_s=latency_s)
    recorder = Recorder(2)
    sim = Simulation(algos, g, RoundSchedule(rounds=1, round_period_s=period), recorder,
                     np.random.default_rng(0), max_message_bytes=2**20)
    sim.run()
    return algos, recorder


def test_message_arrives_after_latency_plus_size_over_bandwidth(repo_root):
    algos, recorder = _two_device_sim(repo_root, bandwidth_bps=8000.0, latency_s=0.25, period=100.0)
    size = recorder.devices[0].bytes_sent
    item = algos[1].cache[0]
    assert item.received_at - item.sent_at == pytest.approx(0.25 + 8 * size / 8000.0)
    assert recorder.devices[1].bytes_received == size
    delays = recorder.delivery_times.summary()   # summary.json's comm.delivery_time_s: both directions
    expected = sorted(0.25 + 8 * d.bytes_sent / 8000.0 for d in recorder.devices)
    assert delays["count"] == 2 and delays["max"] == pytest.approx(expected[1], rel=1e-5)
    assert delays["median"] == pytest.approx(expected[0], rel=0.012)


def test_a_transfer_longer_than_the_run_never_arrives(repo_root):
    # ~5.6 kB at 1 kbit/s needs ~45 s; the run (one 10 s round) ends first
    algos, recorder = _two_device_sim(repo_root, bandwidth_bps=1000.0, latency_s=0.0, period=10.0)
    assert recorder.devices[0].messages_sent == 1
    assert recorder.devices[1].messages_received == 0 and not algos[1].cache


def test_connection_setup_delays_each_links_first_message_only(tmp_path, repo_root):
    """topology.setup_round_trips: a link's first bytes wait for its connection (3 round trips of
    0.2 s links here); every later message takes latency + size / bandwidth as before, and with
    rounds long enough the same artifacts are fused: the same F1."""
    from p2pfed.engine.runner import run_scenario
    from p2pfed.scenario.errors import ScenarioError

    base = ["algorithm.name=gossip-avg", "dataset.synthetic.num_devices=3", "model.hidden=[16]", "rounds=3",
            "topology.kind=complete", "topology.latency_s=0.2", "topology.bandwidth_bps=1e6"]
    scenario = repo_root / "scenarios" / "synthetic-small.yaml"
    plain = run_scenario(load_scenario(scenario, base), tmp_path / "plain", progress=False)
    setup = run_scenario(load_scenario(scenario, [*base, "topology.setup_round_trips=3"]), tmp_path / "setup",
                         progress=False)
    one_way = plain["comm"]["delivery_time_s"]["max"]                  # 0.2 s + the bytes' time
    assert 0.2 < one_way < 0.3
    assert setup["comm"]["delivery_time_s"]["max"] == pytest.approx(3 * 0.4 + one_way, rel=1e-3)
    assert setup["comm"]["delivery_time_s"]["count"] == plain["comm"]["delivery_time_s"]["count"] == 18
    assert setup["comm"]["delivery_time_after_first_s"] == plain["comm"]["delivery_time_after_first_s"]
    assert setup["comm"]["delivery_time_after_first_s"]["count"] == 12   # 6 pairs' first messages left out
    assert setup["final"]["f1_macro_mean"] == plain["final"]["f1_macro_mean"]
    with pytest.raises(ScenarioError, match="topology.setup_round_trips: .*contact runtime"):
        load_scenario(scenario, [*base, "topology.setup_round_trips=3", "contacts.kind=poisson"])
