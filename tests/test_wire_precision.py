"""engine.precision: every method's float tensors on the wire as float32, float16 or int8, restored
by the receiver's intake; a fair yardstick for bytes (issue 30, goal 6)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from p2pfed.cli.main import main
from p2pfed.transport import CodecError, Message, decode, encode
from p2pfed.transport.precision import PRECISION_KEY, reduce_precision, restore_precision

finite = st.floats(-1e4, 1e4, allow_nan=False, width=32)


def _through_the_wire(tensors: dict[str, np.ndarray], precision: str) -> dict[str, np.ndarray]:
    meta, wire = reduce_precision({"num_samples": 3}, tensors, precision)
    msg = decode(encode(Message(kind="x", sender=0, round=0, sent_at=0.0, meta=meta, tensors=wire)))
    record = dict(msg.meta).pop(PRECISION_KEY, None)
    return restore_precision(record, dict(msg.tensors))


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.integers(1, 40), elements=finite), st.sampled_from(["float32", "float16", "int8"]))
def test_float_tensors_come_back_as_float32_within_their_precision(x, precision):
    back = _through_the_wire({"w": x}, precision)["w"]
    assert back.dtype == np.float32 and back.shape == x.shape
    if precision == "float32":
        np.testing.assert_array_equal(back, x)
    elif precision == "float16":   # half precision: 11 significant bits
        np.testing.assert_allclose(back, x, rtol=2**-11, atol=2**-24)
    else:                          # int8: 256 levels between the tensor's min and max
        half_step = (float(x.max()) - float(x.min())) / 255 / 2
        assert np.abs(back.astype(np.float64) - x).max() <= half_step * (1 + 1e-6) + 1e-6 * np.abs(x).max()


def test_integer_and_boolean_tensors_and_the_meta_travel_unchanged():
    tensors = {"units": np.array([[3, 255]], dtype=np.uint8), "mask": np.array([True, False]),
               "count": np.array([7], dtype=np.int64), "w": np.ones((2, 2), np.float32)}
    meta, wire = reduce_precision({"num_samples": 3}, tensors, "int8")
    assert meta["num_samples"] == 3 and set(meta[PRECISION_KEY]) == {"w"}
    for name in ("units", "mask", "count"):
        assert wire[name] is tensors[name]
    back = _through_the_wire(tensors, "int8")
    for name in ("units", "mask", "count"):
        np.testing.assert_array_equal(back[name], tensors[name])


def test_reduced_messages_are_smaller_by_the_width_of_their_values():
    tensors = {f"layer{i}": np.random.default_rng(i).normal(size=(64, 64)).astype(np.float32) for i in range(3)}
    size = {}
    for precision in ("float32", "float16", "int8"):
        meta, wire = reduce_precision({}, tensors, precision)
        size[precision] = len(encode(Message(kind="x", sender=0, round=0, sent_at=0.0, meta=meta, tensors=wire)))
    assert 0.49 < size["float16"] / size["float32"] < 0.52
    assert 0.24 < size["int8"] / size["float32"] < 0.27


def test_a_value_float16_cannot_hold_travels_at_full_precision():
    x = np.array([1.0, 1e6], dtype=np.float32)
    meta, wire = reduce_precision({}, {"w": x}, "float16")
    assert wire["w"].dtype == np.float32 and PRECISION_KEY not in meta
    np.testing.assert_array_equal(_through_the_wire({"w": x}, "float16")["w"], x)


@pytest.mark.parametrize("record, message", [
    ([1, 2], "map of tensor names"),
    ({"gone": ["float32"]}, "'gone', which is not sent"),
    ({"w": ["int64"]}, "'w': record must start with"),
    ({"w": ["float32", -1.0, 0.0]}, "'w' \\(int8\\) does not match"),
    ({"w": ["float32", 1.0]}, "'w' \\(int8\\) does not match"),
    ({"w": ["float32"]}, "'w' \\(int8\\) does not match"),
])
def test_a_bad_precision_record_is_refused_naming_the_tensor(record, message):
    with pytest.raises(CodecError, match=message) as err:
        restore_precision(record, {"w": np.zeros(3, np.int8)})
    assert err.value.reason == "bad-precision"


def test_the_reserved_key_is_refused_in_a_methods_meta():
    with pytest.raises(ValueError, match="reserved"):
        reduce_precision({PRECISION_KEY: 1}, {"w": np.zeros(2, np.float32)}, "float16")


def _run(tmp_path, name, *extra):
    out = tmp_path / name
    assert main(["run", "--quiet", "--out", str(out), "--set", "rounds=3", "--set", "dataset.name=synthetic",
                 "--set", "model.hidden=[128,128]", *extra]) == 0
    return json.loads((out / "summary.json").read_text())


def test_a_run_at_float16_sends_half_the_bytes_of_float32_for_every_method_alike(tmp_path):
    """FedSub and gossip-avg on the same data at float32 and float16: each method's bytes halve
    (to the JSON headers), the yardstick halves with them, and nothing is dropped."""
    ratios = {}
    for method in ("fedsub", "gossip-avg"):
        s32 = _run(tmp_path, f"{method}-32", "--algorithm", method)
        s16 = _run(tmp_path, f"{method}-16", "--algorithm", method, "--set", "engine.precision=float16")
        assert s16["comm"]["precision"] == "float16" and s32["comm"]["precision"] == "float32"
        assert s16["comm"]["messages_dropped"] == 0 and s16["comm"]["messages_sent"] == s32["comm"]["messages_sent"]
        ratios[method] = s16["comm"]["bytes_sent_total"] / s32["comm"]["bytes_sent_total"]
        assert 0.45 < ratios[method] < 0.6, ratios
        assert 0.45 < s16["comm"]["full_model_bytes"] / s32["comm"]["full_model_bytes"] < 0.55
        assert abs(s16["final"]["f1_macro_mean"] - s32["final"]["f1_macro_mean"]) < 0.1


def test_fedsubs_own_float16_option_points_to_the_transport_setting(tmp_path, capsys):
    assert main(["run", "--quiet", "--out", str(tmp_path / "x"), "--set", "algorithm.float16=true"]) != 0
    assert "algorithm: float16: replaced by engine.precision: float16" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
