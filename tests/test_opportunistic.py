"""The opportunistic runtime, with exact expectations: bandwidth × contact time, aborts, churn, hops."""

import numpy as np
import pytest

from p2pfed.algorithms.base import Algorithm, Payload, Received
from p2pfed.network.contacts import ContactPlan, make_contact
from p2pfed.device.exchange import Forwarding
from p2pfed.engine.opportunistic import AsyncSchedule, OpportunisticSimulation
from p2pfed.results.recorder import Recorder
from tests.hand_driven import stub_context


class Blob(Algorithm):
    """A method that shares fixed-size parts and remembers everything it receives."""

    name = "blob"
    message_kind = "test/blob"

    def __init__(self, sizes: list[tuple[str, int]]) -> None:
        super().__init__(ctx=stub_context(), options=None)   # the runtime offers neighbours
        self.sizes = sizes
        self.got: list[Received] = []

    def train(self, round: int) -> None:
        return None

    def share(self, round: int) -> list[Payload]:
        return [Payload({"part": name}, {"data": np.zeros(size, dtype=np.uint8)}) for name, size in self.sizes]

    def receive(self, item: Received) -> None:
        self.got.append(item)
        super().receive(item)


def run(parts_by_device, contacts, *, duration=100.0, offline=(), forwarding=Forwarding(), loss_rate=0.0,
        policy="smallest-first", seed=0):
    algos = [Blob(p) for p in parts_by_device]
    recorder = Recorder(len(algos))
    plan = ContactPlan(len(algos), contacts)
    schedule = AsyncSchedule(duration_s=duration, train_period_s=10 * duration, eval_every_s=duration,
                             send_policy=policy, loss_rate=loss_rate)
    sim = OpportunisticSimulation(algos, plan, schedule, recorder, np.random.default_rng(seed),
                                  max_message_bytes=8 * 2**20, forwarding=forwarding, offline=list(offline),
                                  first_training_s=[0.0] * len(algos))
    sim.run()
    return algos, recorder


MBIT = 1e6
KB = 1000


def test_ten_second_contact_at_1_mbit_delivers_at_most_1_25_mb_and_wastes_the_rest():
    algos, rec = run([[("a", 400 * KB), ("b", 400 * KB), ("c", 400 * KB), ("d", 400 * KB)], []],
                     [make_contact(0, 1, 0.0, 10.0, MBIT, 0.0)])
    size = rec.devices[1].bytes_received // 3
    assert [r.payload.meta["part"] for r in algos[1].got] == ["a", "b", "c"]
    assert rec.devices[1].bytes_received == 3 * size <= 1_250_000
    d = rec.devices[0]
    assert (d.transfers_started, d.transfers_completed, d.transfers_aborted) == (4, 3, 1)
    assert abs(d.bytes_wasted - (1_250_000 - 3 * size)) <= 1   # the 4th message's bytes on air


def test_a_2_mb_message_in_a_10_s_contact_is_aborted_and_wasted():
    algos, rec = run([[("big", 2_000_000)], []], [make_contact(0, 1, 0.0, 10.0, MBIT, 0.0)])
    assert algos[1].got == [] and rec.devices[1].bytes_received == 0   # nothing partial
    d = rec.devices[0]
    assert (d.transfers_started, d.transfers_completed, d.transfers_aborted) == (1, 0, 1)
    assert d.bytes_wasted == 1_250_000 and d.bytes_sent == 0


def test_small_part_first_gets_through_a_short_contact():
    parts = [("subnetworks", 2_000_000), ("prototypes", 2 * KB)]
    algos, _ = run([parts, []], [make_contact(0, 1, 0.0, 10.0, MBIT, 0.0)])
    assert [r.payload.meta["part"] for r in algos[1].got] == ["prototypes"]
    algos, rec = run([parts, []], [make_contact(0, 1, 0.0, 10.0, MBIT, 0.0)], policy="largest-first")
    assert algos[1].got == [] and rec.devices[0].transfers_aborted == 1


def test_latency_counts_against_the_contact():
    # 100 kB take 0.8 s on a 1 Mbit/s link: with 9 s latency they arrive at 9.8 s, inside the contact...
    algos, rec = run([[("a", 100 * KB)], []], [make_contact(0, 1, 0.0, 10.0, MBIT, 9.0)])
    size = rec.devices[0].bytes_sent
    assert algos[1].got[0].received_at == pytest.approx(9.0 + 8 * size / MBIT)
    # ...with 9.5 s they would arrive after it ends: aborted, every byte already sent is wasted.
    algos, rec = run([[("a", 100 * KB)], []], [make_contact(0, 1, 0.0, 10.0, MBIT, 9.5)])
    assert algos[1].got == [] and rec.devices[0].transfers_aborted == 1
    assert rec.devices[0].bytes_wasted == size


def test_device_offline_during_a_contact_receives_nothing():
    algos, rec = run([[("a", 1 * KB)], []], [make_contact(0, 1, 5.0, 15.0, MBIT, 0.0)],
                     offline=[(1, 0.0, 20.0)])
    assert algos[1].got == [] and rec.total("transfers_started") == 0


def test_going_offline_mid_transfer_aborts_it():
    algos, rec = run([[("big", 2_000_000)], []], [make_contact(0, 1, 0.0, 30.0, MBIT, 0.0)],
                     offline=[(1, 5.0, 40.0)])
    assert algos[1].got == []
    assert rec.devices[0].transfers_aborted == 1 and rec.devices[0].bytes_wasted == 625_000


def test_back_online_within_the_contact_resumes_from_scratch():
    algos, rec = run([[("a", 500 * KB)], []], [make_contact(0, 1, 0.0, 30.0, MBIT, 0.0)],
                     offline=[(1, 2.0, 5.0)])
    assert [r.payload.meta["part"] for r in algos[1].got] == ["a"]
    assert rec.devices[0].transfers_aborted == 1 and rec.devices[0].bytes_wasted == 250_000
    assert algos[1].got[0].received_at == pytest.approx(5.0 + 8 * rec.devices[1].bytes_received / MBIT)


def test_nothing_is_sent_twice_to_the_same_peer():
    algos, rec = run([[("a", 1 * KB)], []], [make_contact(0, 1, 0.0, 10.0, MBIT, 0.0),
                                            make_contact(0, 1, 20.0, 30.0, MBIT, 0.0)])
    assert len(algos[1].got) == 1 and rec.total("transfers_started") == 1


def test_prototype_over_two_hops_keeps_its_origin_and_age():
    parts = [("prototypes", 1 * KB), ("subnetworks", 20 * KB)]
    algos, rec = run([parts, [], []], [make_contact(0, 1, 100.0, 110.0, MBIT, 0.0),
                                       make_contact(1, 2, 300.0, 310.0, MBIT, 0.0)],
                     duration=400.0, forwarding=Forwarding(hop_limit=3))
    (item,) = algos[2].got    # the subnetworks are not carried by default
    assert (item.sender, item.hops, item.payload.meta["part"]) == (0, 2, "prototypes")
    assert item.sent_at == 0.0 and item.age(item.received_at) == item.received_at > 300.0
    assert "relay" not in item.payload.meta
    assert [r.hops for r in algos[1].got] == [1, 1]


def test_hop_limit_and_forwarding_off_stop_the_spread():
    parts = [("prototypes", 1 * KB)]
    contacts = [make_contact(0, 1, 100.0, 110.0, MBIT, 0.0), make_contact(1, 2, 200.0, 210.0, MBIT, 0.0),
                make_contact(2, 3, 300.0, 310.0, MBIT, 0.0)]
    algos, _ = run([parts, [], [], []], contacts, duration=400.0, forwarding=Forwarding(hop_limit=2))
    assert [r.hops for r in algos[2].got] == [2] and algos[3].got == []
    algos, _ = run([parts, [], [], []], contacts, duration=400.0)
    assert algos[2].got == [] and algos[3].got == []


def test_buffer_limit_evicts_the_oldest_carried_item():
    parts = [("prototypes", 1 * KB)]
    contacts = [make_contact(0, 3, 10.0, 20.0, MBIT, 0.0), make_contact(1, 3, 30.0, 40.0, MBIT, 0.0),
                make_contact(3, 2, 50.0, 60.0, MBIT, 0.0)]
    algos = [Blob(parts), Blob(parts), Blob([]), Blob([])]
    rec = Recorder(4)
    sim = OpportunisticSimulation(algos, ContactPlan(4, contacts),
                                  AsyncSchedule(duration_s=100.0, train_period_s=1e4, eval_every_s=100.0),
                                  rec, np.random.default_rng(0), max_message_bytes=2**20,
                                  forwarding=Forwarding(hop_limit=3, buffer_items=1),
                                  first_training_s=[0.0, 5.0, 0.0, 0.0])
    sim.run()
    assert [(r.sender, r.hops) for r in algos[2].got] == [(1, 2)]   # device 0's older item was evicted


def test_loss_rate_one_half_drops_about_half():
    contacts = [make_contact(0, 1, 10.0 * k, 10.0 * k + 5, MBIT, 0.0) for k in range(400)]
    algos = [Blob([("a", 100)]), Blob([])]
    rec = Recorder(2)
    sim = OpportunisticSimulation(algos, ContactPlan(2, contacts),
                                  AsyncSchedule(duration_s=4000.0, train_period_s=10.0, eval_every_s=4000.0,
                                                loss_rate=0.5),
                                  rec, np.random.default_rng(1), max_message_bytes=2**20,
                                  first_training_s=[0.0, 0.0])
    sim.run()
    lost = rec.drop_reasons["loss"]
    assert rec.total("transfers_completed") == lost + len(algos[1].got)
    assert 0.4 < lost / rec.total("transfers_completed") < 0.6
    mean_size = rec.devices[0].bytes_sent / rec.total("transfers_completed")   # varies by a few header bytes
    assert abs(rec.devices[0].bytes_wasted - lost * mean_size) <= 4 * lost


class Clocked(Blob):
    """A Blob that notes the simulated time of each of its trainings, and of each fusion with
    the senders it fused."""

    def __init__(self, parts, clock) -> None:
        super().__init__(parts)
        self.clock = clock
        self.trained_at: list[float] = []
        self.fused: list[tuple[float, list[int]]] = []

    def train(self, round: int) -> None:
        self.trained_at.append(self.clock())

    def fuse(self, fresh: list[Received], round: int, now: float) -> None:
        self.fused.append((now, [r.sender for r in fresh]))


def _clocked_run(first, window, contacts=(), parts=()):
    sim = None
    algos = [Clocked(list(parts), lambda: float(sim.env.now)) for _ in first]
    sim = OpportunisticSimulation(algos, ContactPlan(len(algos), list(contacts)),
                                  AsyncSchedule(duration_s=200.0, train_period_s=50.0, eval_every_s=200.0,
                                                batch_window_s=window),
                                  Recorder(len(algos)), np.random.default_rng(0), max_message_bytes=2**20,
                                  first_training_s=list(first))
    sim.run()
    return algos, sim


def test_steps_started_in_one_batch_window_finish_together_at_its_end():
    first = [3.0, 12.0, 17.0, 29.0, 31.0]
    alone, sim = _clocked_run(first, 0.0)
    assert [a.trained_at for a in alone] == [[f + 50 * k for k in range(4)] for f in first]
    assert sim.stats()["devices_per_batch"] == 1.0
    algos, sim = _clocked_run(first, 10.0)
    # each step finishes (trains) at the end of its 10 s window; the clocks are not moved
    assert [a.trained_at for a in algos] == [[w + 50 * k for k in range(4)] for w in (10.0, 20.0, 20.0, 30.0, 40.0)]
    # devices 1 and 2 fall due in one window every period: 4 of the 5 devices act in 4 batches a period
    assert (sim.steps_taken, sim.batches_taken) == (20, 16)
    assert sim.stats()["devices_per_batch"] == 20 / 16


def test_a_windows_steps_finish_in_two_halves_in_the_order_they_started(monkeypatch):
    """So that the K sweeps of the later half, sent to the helper process last, have the first
    half's fusion and training time to come back; every step still finishes at the window's end."""
    from p2pfed.engine import contact_steps

    calls = []
    real = contact_steps.finish_together
    monkeypatch.setattr(contact_steps, "finish_together",
                        lambda loops, *a, **kw: calls.append([loop.device for loop in loops]) or real(loops, *a, **kw))
    algos, sim = _clocked_run([3.0, 1.0, 7.0, 5.0, 9.0], 10.0)
    assert calls == [[1, 0, 3], [2, 4]] * 4
    assert all(a.trained_at == [10.0 + 50 * k for k in range(4)] for a in algos)
    assert sim.stats()["devices_per_batch"] == 5.0


def test_a_step_takes_its_inputs_when_it_starts_and_shares_when_its_window_ends():
    """Device 1's step starts at 12 s and finishes at 20 s, with device 2's: device 0 meets it at
    15 s and gets its share once the window ends; device 0's share (made at 10 s) reaches device 1
    during the window but is fused only by device 1's next step."""
    contacts = [make_contact(0, 1, 15.0, 25.0, MBIT, 0.0)]
    algos, sim = _clocked_run([3.0, 12.0, 17.0], 10.0, contacts, parts=[("a", KB)])
    (item,) = algos[0].got
    assert (item.sender, item.round, item.sent_at) == (1, 0, 20.0) and item.received_at > 20.0
    (mine,) = algos[1].got
    assert mine.sender == 0 and 15.0 <= mine.received_at < 20.0
    assert algos[1].fused == [(62.0, [0])]    # by its next step, not the one under way
