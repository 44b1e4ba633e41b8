"""comm.delivery_time_s: delays in logarithmic bins, quantiles within 1.2 % of the exact ones,
merged across real peers and kept through checkpoints; and delivery_time_after_first_s, the same
less each sender-receiver pair's first message."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from p2pfed.results.delays import DelayHistogram
from p2pfed.results.recorder import Recorder

delays = st.lists(st.floats(1e-5, 1e4, allow_nan=False), min_size=1, max_size=300)


def _filled(values: list[float]) -> DelayHistogram:
    h = DelayHistogram()
    for v in values:
        h.add(v)
    return h


@settings(max_examples=80, deadline=None)
@given(delays, st.sampled_from([0.5, 0.95]))
def test_quantiles_are_within_the_bin_width_of_numpys(values, q):
    h = _filled(values)
    exact = np.quantile(values, q, method="inverted_cdf")
    assert abs(h.quantile(q) / exact - 1) <= 10 ** (1 / 100) - 1 + 1e-9
    assert h.summary()["max"] == float(f"{max(values):.6g}") and h.count == len(values)


@settings(max_examples=40, deadline=None)
@given(delays, delays)
def test_merging_two_peers_equals_recording_both_in_one(a, b):
    merged = _filled(a)
    merged.merge(_filled(b))
    both = _filled(a + b)
    assert merged.state_dict() == both.state_dict()


def test_negative_delays_are_counted_apart_and_the_state_survives_a_checkpoint():
    rec = Recorder(2)
    for d in (0.01, 0.02, -0.5, 3.0):
        rec.arrived(d, 0, 1)
    copy = Recorder.from_state(rec.state_dict())
    assert copy.delivery_times.summary() == rec.delivery_times.summary()
    assert rec.delivery_times.summary()["negative"] == 1 and rec.delivery_times.count == 4
    old = rec.state_dict()
    del old["delivery_times"]                   # a state written before the histogram
    assert Recorder.from_state(old).delivery_times.count == 0
    assert DelayHistogram().summary() == {"count": 0, "median": None, "p95": None, "max": None, "negative": 0}


def test_each_pairs_first_message_is_left_out_of_the_steady_state_also_across_a_checkpoint_and_peers():
    rec = Recorder(3)
    for delay, sender, receiver in [(5.0, 0, 1), (0.1, 0, 1), (4.0, 1, 0), (0.2, 0, 1), (0.3, 1, 0)]:
        rec.arrived(delay, sender, receiver)
    assert rec.delivery_times.count == 5 and rec.delivery_times.summary()["max"] == 5.0
    steady = rec.delivery_times_after_first
    assert steady.count == 3 and steady.summary()["max"] == 0.3     # the 5 s and 4 s firsts left out
    resumed = Recorder.from_state(rec.state_dict())
    resumed.arrived(0.4, 1, 0)                  # not a first: the pair was heard before the checkpoint
    resumed.arrived(6.0, 2, 0)                  # a new pair's first
    assert resumed.delivery_times_after_first.count == 4 and resumed.delivery_times_after_first.summary()["max"] == 0.4
    other = Recorder(3)
    other.arrived(7.0, 2, 1)
    merged = Recorder.merge([rec, other])
    assert merged.delivery_times.count == 6 and merged.delivery_times_after_first.count == 3
