"""The contact simulator with real peers' protocol (``contacts.protocol: acknowledged``): summary
vectors first, a transfer complete only when its acknowledgement is back, one queue per direction
with framing bytes. Exact expectations from the message sizes, and the mechanism seen in a run."""

import numpy as np
import pytest

from p2pfed.device.contact_protocol import FRAMING_BYTES, HEADER_BYTES, SEGMENT_BYTES, summary_vector, wire_bytes
from p2pfed.engine.contact_lines import ContactLines
from p2pfed.engine.opportunistic import AsyncSchedule, OpportunisticSimulation
from p2pfed.engine.runner import run_scenario
from p2pfed.network.contacts import ContactPlan, make_contact
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.loader import load_scenario
from p2pfed.scenario.errors import ScenarioError
from tests.conftest import ROOT
from tests.test_opportunistic import Blob

BW, LATENCY, PART = 1e5, 0.1, 10_000
MAX_BYTES = 8 * 2**20


def test_a_message_on_the_wire_pays_framing_and_a_header_per_segment():
    assert wire_bytes(0) == FRAMING_BYTES + HEADER_BYTES
    one_segment = SEGMENT_BYTES - FRAMING_BYTES
    assert wire_bytes(one_segment) == SEGMENT_BYTES + HEADER_BYTES
    assert wire_bytes(one_segment + 1) == SEGMENT_BYTES + 1 + 2 * HEADER_BYTES


def test_an_acknowledgement_waits_behind_what_its_sender_is_already_sending():
    lines, contact = ContactLines(), make_contact(0, 1, 0.0, 100.0, BW, LATENCY)
    big = lines.send((1, 0, 7), contact, 0.0, PART)
    ack = lines.send((1, 0, 7), contact, 0.2, 100)           # queued while the part is still leaving
    assert big == pytest.approx(8 * wire_bytes(PART) / BW + LATENCY)
    assert ack == pytest.approx(big + 8 * wire_bytes(100) / BW)
    other_way = lines.send((0, 1, 7), contact, 0.2, 100)      # the other direction is free
    assert other_way == pytest.approx(0.2 + 8 * wire_bytes(100) / BW + LATENCY)
    lines.close(7)
    assert lines.free_at == {}


def _one_transfer(end: float, protocol: str):
    algos = [Blob([("part", PART)]), Blob([])]
    rec = Recorder(2)
    sim = OpportunisticSimulation(algos, ContactPlan(2, [make_contact(0, 1, 0.0, end, BW, LATENCY)]),
                                  AsyncSchedule(duration_s=10.0, train_period_s=100.0, eval_every_s=10.0,
                                                protocol=protocol),
                                  rec, np.random.default_rng(0), max_message_bytes=MAX_BYTES,
                                  first_training_s=[0.0, 0.0])
    sim.run()
    d = rec.devices[0]
    return (d.transfers_started, d.transfers_completed, d.transfers_aborted), len(algos[1].got), rec, sim


def test_a_transfer_is_complete_when_its_acknowledgement_is_back_and_an_ack_cut_off_leaves_it_aborted():
    _, _, rec, sim = _one_transfer(5.0, "acknowledged")
    size = rec.devices[0].bytes_sent
    summary = len(summary_vector(1, {}, 0.0, 0.0, MAX_BYTES))
    arrives = 8 * wire_bytes(summary) / BW + LATENCY + 8 * wire_bytes(size) / BW + LATENCY
    ideal = 8 * size / BW + LATENCY
    assert sim.control == {"control_messages": 3, "control_bytes": sim.control["control_bytes"]}   # 2 summaries, 1 ack
    assert ideal < 1.0 < arrives < 1.12 < arrives + LATENCY
    # ended before the part arrived: the ideal model had it complete, real peers' protocol has it cut
    assert _one_transfer(1.0, "ideal")[:2] == ((1, 1, 0), 1)
    counts, got, rec, sim = _one_transfer(1.0, "acknowledged")   # all on air, not yet arrived: all wasted
    assert (counts, got, rec.devices[0].bytes_wasted) == ((1, 0, 1), 0, size)
    # ended after it arrived but before the acknowledgement was back: the receiver has it, the
    # sender counts it aborted, all its bytes wasted (as between real peers)
    counts, got, rec, sim = _one_transfer(1.12, "acknowledged")
    assert (counts, got, rec.devices[0].bytes_wasted, rec.devices[0].bytes_sent) == ((1, 0, 1), 1, size, 0)
    assert sim.control["control_messages"] == 3
    assert _one_transfer(5.0, "acknowledged")[:2] == ((1, 1, 0), 1)


SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
POISSON = ["dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=16", "model.hidden=[16,32]",
           "contacts.kind=poisson", "contacts.mean_intercontact_s=120", "contacts.mean_duration_s=30",
           "contacts.bandwidth_bps=2e4", "contacts.duration_s=1200", "asynchronous.train_period_s=120",
           "forwarding.enabled=true", "evaluation.every_s=300", "algorithm.name=fedsub"]


def test_in_a_run_every_contact_opens_with_two_summary_vectors_and_every_part_taken_in_is_acknowledged(tmp_path):
    ideal = run_scenario(load_scenario(SCENARIO, POISSON), tmp_path / "ideal", progress=False)
    acked = run_scenario(load_scenario(SCENARIO, POISSON + ["contacts.protocol=acknowledged"]), tmp_path / "acked",
                         progress=False)
    assert ideal["contact_protocol"] == {"protocol": "ideal", "control_messages": 0, "control_bytes": 0}
    control, comm = acked["contact_protocol"], acked["comm"]
    opened = 2 * round(acked["contacts"]["contacts"])
    assert comm["transfers_aborted"] > 0 and comm["transfers_completed"] > 0
    # a summary vector each way per contact, an acknowledgement per part that arrived: every
    # completed one, and those whose acknowledgement the contact's end cut off
    assert opened + comm["transfers_completed"] <= control["control_messages"]
    assert control["control_messages"] <= opened + comm["transfers_completed"] + comm["transfers_aborted"]
    assert control["control_bytes"] > 100 * control["control_messages"]


def test_loss_rate_with_the_acknowledged_protocol_is_refused_by_name():
    with pytest.raises(ScenarioError, match="contacts.loss_rate"):
        load_scenario(SCENARIO, POISSON + ["contacts.protocol=acknowledged", "contacts.loss_rate=0.1"])
