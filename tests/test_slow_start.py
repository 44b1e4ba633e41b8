"""The simulator's slow-start term (``topology.slow_start``, ``p2pfed/network/slow_start.py``):
exact times from the window rule, the term in a run, and a checkpoint in the middle of it."""

import pytest
import torch

from p2pfed.engine.runner import Checkpointing, run_scenario
from p2pfed.network.slow_start import INITIAL_WINDOW_SEGMENTS, RTO_FLOOR_S, SEGMENT_BYTES, Window, send
from p2pfed.scenario.loader import load_scenario
from p2pfed.scenario.errors import ScenarioError
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
RTT, BANDWIDTH = 0.1, 100e6
SEGMENT_S = 8 * SEGMENT_BYTES / BANDWIDTH


def test_a_message_within_the_initial_window_leaves_at_the_links_rate():
    size = INITIAL_WINDOW_SEGMENTS * SEGMENT_BYTES
    assert send(Window(), 0.0, size, BANDWIDTH, RTT) == pytest.approx(8 * size / BANDWIDTH)


def test_a_larger_message_on_a_fresh_link_waits_a_round_trip_per_extra_flight():
    # 29 segments: 10 now, 19 (of a window of 20) one round trip later; 111: 10, 20, 40, then 41
    assert send(Window(), 0.0, 29 * SEGMENT_BYTES, BANDWIDTH, RTT) == pytest.approx(RTT + 19 * SEGMENT_S)
    assert send(Window(), 0.0, 111 * SEGMENT_BYTES, BANDWIDTH, RTT) == pytest.approx(3 * RTT + 41 * SEGMENT_S)


def test_the_grown_window_is_kept_on_a_busy_link_and_restarted_after_idle():
    window = Window()
    first = send(window, 0.0, 29 * SEGMENT_BYTES, BANDWIDTH, RTT)
    assert window.segments == INITIAL_WINDOW_SEGMENTS + 29
    # straight after: the 39-segment window holds the next message, no round trip to wait
    again = send(window, first, 29 * SEGMENT_BYTES, BANDWIDTH, RTT)
    assert again - first == pytest.approx(29 * SEGMENT_S)
    # idle for ten retransmission timeouts: halved down to the initial window, a round trip again
    later = again + 10 * (RTT + RTO_FLOOR_S)
    assert send(window, later, 29 * SEGMENT_BYTES, BANDWIDTH, RTT) - later == pytest.approx(RTT + 19 * SEGMENT_S)


def test_where_the_link_is_the_limit_the_window_adds_nothing():
    slow = 1e5   # a 10-segment flight takes 1.16 s, longer than the round trip
    size = 29 * SEGMENT_BYTES
    assert send(Window(), 0.0, size, slow, RTT) == pytest.approx(8 * size / slow)


SETS = ["dataset.synthetic.num_devices=3", "dataset.synthetic.samples_per_class=12", "model.hidden=[64,128]",
        "topology.kind=complete", "rounds=3", "algorithm.name=gossip-avg", "topology.latency_s=0.05",
        "topology.bandwidth_bps=1e8", "engine.round_period_s=4"]


def test_in_a_run_a_multi_segment_message_takes_a_round_trip_more(tmp_path):
    plain = run_scenario(load_scenario(SCENARIO, SETS), tmp_path / "plain", progress=False)["comm"]
    slow = run_scenario(load_scenario(SCENARIO, SETS + ["topology.slow_start=true"]), tmp_path / "slow",
                        progress=False)["comm"]
    size = plain["bytes_per_message"]
    assert INITIAL_WINDOW_SEGMENTS * SEGMENT_BYTES < size <= 30 * SEGMENT_BYTES   # two flights
    largest = plain["delivery_time_s"]["max"]   # the largest message (sizes differ by a few kB)
    assert 0.05 + 8 * 30000 / 1e8 < largest <= 0.05 + 8 * size / 1e8 + 1e-6
    # every link idle for a round (4 s, many timeouts): each message restarts at 10 segments, and
    # its segments past the first ten leave one round trip after the first
    assert slow["delivery_time_s"]["max"] == pytest.approx(largest + 2 * 0.05 - 8 * 10 * SEGMENT_BYTES / 1e8,
                                                           rel=1e-4)
    assert slow["bytes_sent_total"] == plain["bytes_sent_total"]
    with pytest.raises(ScenarioError, match="topology.slow_start"):
        load_scenario(SCENARIO, SETS + ["topology.slow_start=true", "contacts.kind=poisson"])


def test_the_windows_survive_a_checkpoint_bit_identical(tmp_path):
    sets = SETS + ["topology.slow_start=true", "engine.round_period_s=0.3", "rounds=4"]   # idle < 2 timeouts
    whole = run_scenario(load_scenario(SCENARIO, sets), tmp_path / "whole", progress=False)
    ckpt = Checkpointing(tmp_path / "run.ckpt", every=1, stop_after_round=2)
    assert run_scenario(load_scenario(SCENARIO, sets), None, progress=False, checkpointing=ckpt) is None
    assert torch.load(ckpt.path, weights_only=True)["state"]["windows"]
    resumed = run_scenario(load_scenario(SCENARIO, sets), tmp_path / "resumed", progress=False,
                           checkpointing=Checkpointing(ckpt.path))
    assert {k: v for k, v in resumed.items() if k != "wall_time_s"} == {k: v for k, v in whole.items()
                                                                       if k != "wall_time_s"}
    for name in ("rounds.csv", "devices.csv"):
        assert (tmp_path / "resumed" / name).read_text() == (tmp_path / "whole" / name).read_text()
