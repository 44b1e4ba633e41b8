"""Real rounds on one shared wall-clock grid (``launch --shared-grid``), and the simulator's
framing term (``topology.framing``): the two pieces that make real peers fuse the same artifacts
in each round as the simulator (``bench/late_validation.py``)."""

import json
import time

import pytest
import yaml

from p2pfed.cli.main import main
from p2pfed.device.contact_protocol import wire_bytes
from p2pfed.engine.runner import run_scenario
from p2pfed.peer.config import load_peer_config
from p2pfed.scenario.loader import load_scenario
from p2pfed.scenario.errors import ScenarioError
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
TINY = ["dataset.synthetic.num_devices=3", "dataset.synthetic.samples_per_class=12", "model.hidden=[8,16]",
        "topology.kind=complete", "rounds=4", "algorithm.name=gossip-avg"]


@pytest.mark.slow   # in the slow set .ci/run also runs (the default suite's 10 minutes)
def test_peers_on_a_shared_grid_end_each_round_together_and_wait_for_no_one(tmp_path, capsys):
    out = tmp_path / "grid"
    began = time.time()
    code = main(["launch", str(SCENARIO), "--out", str(out), "--round-period", "1", "--shared-grid",
                 *sum((["--set", s] for s in TINY), [])])
    assert code == 0, capsys.readouterr().err
    configs = [yaml.safe_load(p.read_text()) for p in sorted(out.glob("peers/peer-*/peer.yaml"))]
    start = {c["start_time"] for c in configs}
    assert len(start) == 1 and all(c["shared_grid"] for c in configs)
    start_time = start.pop()
    assert start_time > began + 10          # ahead of every peer's start: their connections are up by then
    for peer in out.glob("peers/peer-*/peer.json"):
        report = json.loads(peer.read_text())
        assert report["rounds_done"] == 4 and report["timed_out"] == []
    rows = [line.split(",") for line in (out / "rounds.csv").read_text().splitlines()[1:]]
    # round r (1-based in rounds.csv) acts no earlier than its place on the grid: start_time + (r - 1)
    # periods (sim_time_s counts from start_time); a lower bound, whatever the machine's load
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]
    assert all(float(r[1]) >= int(r[0]) - 1 for r in rows)
    # (whether an artifact is late depends on this machine's load: not asserted either way)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["comm"]["messages_dropped"] == 0
    # every peer read each neighbour's clock before the grid's start: one machine, offsets near 0
    offsets = summary["runtime"]["clock_offsets"]
    assert {p: sorted(o) for p, o in offsets.items()} == {"0": ["1", "2"], "1": ["0", "2"], "2": ["0", "1"]}
    assert all(abs(o["offset_s"]) <= o["round_trip_s"] / 2 + 0.05 for p in offsets.values() for o in p.values())


def test_a_shared_grid_needs_its_period_and_a_shared_start(tmp_path, capsys):
    assert main(["launch", str(SCENARIO), "--out", str(tmp_path / "x"), "--shared-grid"]) == 2   # a refusal
    assert capsys.readouterr().err == "--shared-grid: needs --round-period SECONDS (the grid's step)\n"
    (tmp_path / "hosts.yaml").write_text("hosts: [10.0.0.1, 10.0.0.2, 10.0.0.3]\n")
    code = main(["plan", str(SCENARIO), "--hosts", str(tmp_path / "hosts.yaml"), "--out", str(tmp_path / "b"),
                 "--round-period", "1", "--shared-grid", *sum((["--set", s] for s in TINY), [])])
    err = capsys.readouterr().err
    assert code == 2 and "--shared-grid" in err and "--start-at UNIX_TIME" in err
    peer = tmp_path / "peer.yaml"
    peer.write_text(yaml.safe_dump({"id": 0, "listen": "tcp://127.0.0.1:5555", "round_period_s": 1.0,
                                    "shared_grid": True}))
    with pytest.raises(ScenarioError, match="shared_grid needs round_period_s > 0 and start_time"):
        load_peer_config(peer, insecure=True)


def test_framing_makes_a_message_occupy_its_link_for_its_bytes_on_the_wire(tmp_path):
    sets = TINY + ["rounds=2", "topology.latency_s=0", "topology.bandwidth_bps=1e5"]
    plain = run_scenario(load_scenario(SCENARIO, sets), tmp_path / "plain", progress=False)["comm"]
    framed = run_scenario(load_scenario(SCENARIO, sets + ["topology.framing=true"]), tmp_path / "framed",
                          progress=False)["comm"]
    size = plain["bytes_per_message"]
    assert framed["bytes_sent_total"] == plain["bytes_sent_total"]     # bytes counted are the encoded ones
    assert plain["delivery_time_s"]["median"] == pytest.approx(8 * size / 1e5, rel=0.012)
    assert framed["delivery_time_s"]["median"] == pytest.approx(8 * wire_bytes(size) / 1e5, rel=0.012)
    with pytest.raises(ScenarioError, match="topology.framing"):
        load_scenario(SCENARIO, sets + ["topology.framing=true", "contacts.kind=poisson"])
