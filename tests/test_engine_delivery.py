"""The simulator's last hop: a broadcast passes through the sockets once, is decoded once, and its
receivers share that copy and what methods derive from it, while each receiver still runs its own
checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from p2pfed.algorithms import Payload
from p2pfed.device import IntakeRules, merge_parts
from p2pfed.device.wire import encode_share
from p2pfed.engine.delivery import Delivery, Frame
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import build_algorithms
from p2pfed.scenario.loader import load_scenario
from p2pfed.testing import train_once

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
MAX = 1 << 20


def federation(algorithm: str = "gossip-avg", n: int = 4):
    loaded = load_scenario(SCENARIOS / "synthetic-small.yaml",
                           [f"algorithm.name={algorithm}", f"dataset.synthetic.num_devices={n}"])
    algorithms = build_algorithms(loaded, loaded.federation)
    recorder = Recorder(n)
    return algorithms, recorder, Delivery(algorithms, recorder, IntakeRules(MAX, rounds=5, num_devices=n))


def test_a_broadcast_is_decoded_once_and_its_receivers_share_one_read_only_copy():
    algorithms, recorder, delivery = federation()
    payload = algorithms[0].share(0)
    data = encode_share(algorithms[0].message_kind, 0, 0, 0.0, payload, MAX)
    frame = delivery.carry(Frame(data), [1, 2, 3])   # through the sockets once
    assert frame is not None and delivery.network.stats.sent == 1
    items = [delivery.take(0, dst, frame, 1.0, 0) for dst in (1, 2, 3)]
    assert all(item is not None for item in items)
    assert delivery.decoded == 1
    assert items[0].payload.memo is items[1].payload.memo is frame.memo
    name = next(iter(items[0].payload.tensors))
    arrays = [item.payload.tensors[name] for item in items]
    assert all(np.shares_memory(arrays[0], a) for a in arrays[1:])
    assert not arrays[0].flags.writeable
    np.testing.assert_array_equal(arrays[0], payload.tensors[name])
    assert recorder.messages_dropped == 0
    # A second broadcast (a new frame, even with the same bytes) is decoded again.
    assert delivery.deliver(0, 1, bytes(bytearray(data)), 2.0, 0) is not None
    assert delivery.decoded == 2
    delivery.close()


def test_every_receiver_still_checks_a_shared_message_against_its_own_model():
    algorithms, recorder, delivery = federation()
    good = algorithms[0].share(0)
    wrong = {k: np.zeros((v.shape[0] + 1, *v.shape[1:]), dtype=v.dtype) if v.ndim else v
             for k, v in good.tensors.items()}
    data = encode_share(algorithms[0].message_kind, 0, 0, 0.0, Payload(good.meta, wrong), MAX)
    frame = delivery.carry(Frame(data), [1, 2, 3])
    assert all(delivery.take(0, dst, frame, 1.0, 0) is None for dst in (1, 2, 3))
    assert delivery.decoded == 1                            # decoded once ...
    assert recorder.drop_reasons["artifact"] == 3           # ... refused by each receiver
    delivery.close()


def test_a_message_that_does_not_decode_is_refused_by_each_receiver():
    _, recorder, delivery = federation()
    for dst in (1, 2):
        assert delivery.deliver(0, dst, b"P2PF-not-a-message", 1.0, 0) is None
    assert delivery.decoded == 0
    assert sum(v for k, v in recorder.drop_reasons.items() if k.startswith("codec:")) == 2
    delivery.close()


def test_a_frame_the_sockets_refuse_is_counted_by_each_receiver():
    _, recorder, delivery = federation()
    assert delivery.carry(Frame(b"x" * (MAX + 1)), [1, 2]) is None   # over max_message_bytes
    for dst in (1, 2):
        assert delivery.take(0, dst, None, 1.0, 0) is None
    assert recorder.drop_reasons["transport"] == 2
    delivery.close()


def test_fedsub_receivers_with_the_same_model_shapes_share_one_checked_parse():
    algorithms, recorder, delivery = federation("fedsub")
    for algo in algorithms:
        train_once(algo, 0)
    (payload,) = merge_parts(algorithms[0].share(0))
    frame = delivery.carry(Frame(encode_share(algorithms[0].kind(), 0, 0, 0.0, payload, MAX)), [1, 2, 3])
    assert all(delivery.take(0, dst, frame, 1.0, 0) is not None for dst in (1, 2, 3))
    parsed = [algorithms[dst].cache[0].parsed for dst in (1, 2, 3)]
    assert parsed[0] is parsed[1] is parsed[2]            # checked once for these shapes
    assert not parsed[0].prototypes.flags.writeable       # shared, so read-only
    # A part addressed to one peer is still refused by every other receiver of the same frame.
    addressed = Payload({**payload.meta, "to": 2}, payload.tensors)
    frame = delivery.carry(Frame(encode_share(algorithms[0].kind(), 0, 1, 2.0, addressed, MAX)), [1, 2, 3])
    taken = [delivery.take(0, dst, frame, 3.0, 0) for dst in (1, 2, 3)]
    assert [item is not None for item in taken] == [False, True, False]
    assert recorder.drop_reasons["artifact"] == 2
    delivery.close()
