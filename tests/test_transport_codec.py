"""Wire codec: exact round trips, exact sizes, and rejection of every malformed blob."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2pfed.transport.codec import (
    ALLOWED_DTYPES,
    MAGIC,
    CodecError,
    Message,
    decode,
    encode,
    encoded_size,
)


def msg(tensors: dict[str, np.ndarray] | None = None, meta: dict | None = None, **kw) -> Message:
    fields = dict(kind="fedsub/artifacts", sender=3, round=7, sent_at=12.5)
    fields.update(kw)
    return Message(meta={} if meta is None else meta, tensors={} if tensors is None else tensors, **fields)


def small() -> Message:
    return msg({"w": np.arange(6, dtype=np.float32).reshape(2, 3), "y": np.array([1, 2], dtype=np.int64)}, {"n": 2})


def build(header: dict, payload: bytes = b"", version: int = 1) -> bytes:
    """Hand-build a blob so decode can be fed headers encode would refuse to write."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<BI", version, len(raw)) + raw + payload


def header(**over) -> dict:
    h = {"kind": "k", "sender": 0, "round": 0, "sent_at": 0.0, "meta": {}, "tensors": []}
    h.update(over)
    return h


def reason(data: bytes, **kw) -> str:
    with pytest.raises(CodecError) as info:
        decode(data, **kw)
    return info.value.reason


def assert_same(a: Message, b: Message) -> None:
    assert (a.kind, a.sender, a.round, a.sent_at, a.meta) == (b.kind, b.sender, b.round, b.sent_at, b.meta)
    assert list(a.tensors) == list(b.tensors)
    for name, x in a.tensors.items():
        y = b.tensors[name]
        assert y.dtype == x.dtype and y.shape == x.shape, name
        np.testing.assert_array_equal(y, x)


# ------------------------------------------------------------------ round trips


@pytest.mark.parametrize("dtype", sorted(ALLOWED_DTYPES))
def test_round_trip_every_dtype(dtype: str) -> None:
    rng = np.random.default_rng(0)
    arr = (rng.standard_normal((3, 4)) * 50).astype(dtype)
    m = msg({"a": arr, "scalar": np.array(arr.flat[1]), "empty": np.zeros((0, 5), dtype=dtype)})
    out = decode(encode(m))
    assert_same(m, out)
    assert out.tensors["scalar"].shape == ()
    assert all(not t.flags.writeable for t in out.tensors.values())


def test_round_trip_empty_tensors_and_nested_meta() -> None:
    meta = {"ids": [1, 2, 3], "cfg": {"lr": 0.01, "tags": ["a", "é"], "opt": None, "on": True}, "deep": [[{"x": []}]]}
    m = msg(meta=meta)
    assert_same(m, decode(encode(m)))


def test_big_endian_and_non_contiguous_inputs_decode_to_same_values() -> None:
    base = np.arange(24, dtype=">f8").reshape(4, 6)
    m = msg({"be": base, "strided": base[:, ::2].astype(np.int16), "fortran": np.asfortranarray(base)})
    out = decode(encode(m))
    for name, x in m.tensors.items():
        np.testing.assert_array_equal(out.tensors[name], x)
        assert out.tensors[name].dtype.name == x.dtype.name


def test_decode_accepts_memoryview_and_bytearray() -> None:
    data = encode(small())
    assert_same(small(), decode(memoryview(data)))
    assert_same(small(), decode(bytearray(data)))
    assert not decode(bytearray(data)).tensors["w"].flags.writeable


def test_exact_size_and_compact_header() -> None:
    m = small()
    data = encode(m)
    (header_len,) = struct.unpack_from("<I", data, 5)
    nbytes = sum(t.nbytes for t in m.tensors.values())
    assert len(data) == 4 + 1 + 4 + header_len + nbytes == encoded_size(m)
    head = data[9 : 9 + header_len]
    assert b" " not in head and b"\n" not in head
    assert json.loads(head)["tensors"] == [
        {"name": "w", "dtype": "float32", "shape": [2, 3]},
        {"name": "y", "dtype": "int64", "shape": [2]},
    ]


def test_non_finite_allowed_when_not_required() -> None:
    m = msg({"x": np.array([np.nan, np.inf], dtype=np.float32)})
    out = decode(encode(m, require_finite=False), require_finite=False)
    assert np.isnan(out.tensors["x"][0]) and np.isinf(out.tensors["x"][1])


# ------------------------------------------------------------------ decode rejections


def test_rejects_bad_magic_and_version() -> None:
    data = encode(small())
    assert reason(b"XXXX" + data[4:]) == "bad-magic"
    assert reason(b"X") == "bad-magic"
    assert reason(data[:4] + b"\x02" + data[5:]) == "bad-version"


def test_rejects_truncation_at_every_cut_point() -> None:
    data = encode(small())
    for cut in range(len(data)):
        assert reason(data[:cut]) == "truncated", cut


def test_rejects_trailing_garbage() -> None:
    assert reason(encode(small()) + b"\x00") == "trailing-bytes"


def test_rejects_oversized_before_anything_else() -> None:
    data = encode(small())
    assert reason(data, max_bytes=len(data) - 1) == "oversized"
    assert reason(b"garbage" * 10, max_bytes=8) == "oversized"
    decode(data, max_bytes=len(data))


def test_rejects_header_length_beyond_blob() -> None:
    data = bytearray(encode(small()))
    struct.pack_into("<I", data, 5, len(data))
    assert reason(bytes(data)) == "truncated"


@pytest.mark.parametrize("raw", [b"not json", b"\xff\xfe", b"[1,2]", b'{"kind":NaN}', b"[" * 100_000])
def test_rejects_non_json_header(raw: bytes) -> None:
    assert reason(MAGIC + struct.pack("<BI", 1, len(raw)) + raw) == "bad-header"


@pytest.mark.parametrize(
    "over",
    [
        {"kind": 5},
        {"kind": "Upper"},
        {"kind": ""},
        {"kind": "x" * 65},
        {"sender": -1},
        {"sender": "3"},
        {"sender": True},
        {"sender": 1.0},
        {"round": None},
        {"sent_at": "now"},
        {"sent_at": 1e999},
        {"meta": []},
        {"meta": {"x": 1e999}},
        {"tensors": {}},
        {"tensors": [["w", "float32", [1]]]},
        {"tensors": [{"name": "w", "dtype": "float32"}]},
        {"tensors": [{"name": "w", "dtype": "float32", "shape": [], "extra": 1}]},
        {"tensors": [{"name": "", "dtype": "float32", "shape": []}]},
        {"tensors": [{"name": "w", "dtype": "uint8", "shape": [0]}] * 2},
        {"extra": 1},
    ],
)
def test_rejects_wrong_header_fields(over: dict) -> None:
    assert reason(build(header(**over))) == "bad-header"


def test_rejects_missing_field_and_duplicate_json_key() -> None:
    h = header()
    del h["round"]
    assert reason(build(h)) == "bad-header"
    raw = b'{"kind":"k","kind":"k","sender":0,"round":0,"sent_at":0,"meta":{},"tensors":[]}'
    assert reason(MAGIC + struct.pack("<BI", 1, len(raw)) + raw) == "bad-header"


@pytest.mark.parametrize("dtype", ["object", "complex64", "<f4", "float128", 3, None])
def test_rejects_unknown_dtype(dtype: object) -> None:
    h = header(tensors=[{"name": "x", "dtype": dtype, "shape": [1]}])
    assert reason(build(h, b"\x00" * 8)) == "bad-dtype"


@pytest.mark.parametrize("shape", [[-1], [2, -3], [1.5], ["2"], [True], [1] * 9, 3, [2**40, 2**40], [2**62]])
def test_rejects_bad_shapes(shape: object) -> None:
    h = header(tensors=[{"name": "x", "dtype": "float32", "shape": shape}])
    assert reason(build(h, b"\x00" * 8)) == "bad-shape"


def test_rejects_buffer_size_mismatch_from_header() -> None:
    h = header(tensors=[{"name": "x", "dtype": "int32", "shape": [2]}])
    assert reason(build(h, b"\x00" * 7)) == "truncated"
    assert reason(build(h, b"\x00" * 9)) == "trailing-bytes"
    assert decode(build(h, b"\x01\x00\x00\x00" * 2)).tensors["x"].tolist() == [1, 1]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_rejects_non_finite_when_required(bad: float) -> None:
    data = encode(msg({"x": np.array([1.0, bad], dtype=np.float16)}), require_finite=False)
    assert reason(data) == "not-finite"


# ------------------------------------------------------------------ encode rejections


@pytest.mark.parametrize(
    ("m", "why"),
    [
        (msg(kind="Bad Kind"), "bad-header"),
        (msg(sender=-1), "bad-header"),
        (msg(round=1.5), "bad-header"),
        (msg(sent_at=float("nan")), "bad-header"),
        (msg(meta={1: "x"}), "bad-header"),
        (msg(meta={"t": (1, 2)}), "bad-header"),
        (msg(meta={"f": np.float32(1)}), "bad-header"),
        (msg(meta={"x": float("inf")}), "bad-header"),
        (msg({"o": np.array([object()])}), "bad-dtype"),
        (msg({"c": np.zeros(2, np.complex64)}), "bad-dtype"),
        (msg({"l": [1.0, 2.0]}), "bad-dtype"),
        (msg({"": np.zeros(1)}), "bad-header"),
        (msg({"deep": np.zeros((1,) * 9)}), "bad-shape"),
        (msg({"nan": np.array([np.nan])}), "not-finite"),
        (msg({"big": np.zeros(300, np.uint8)}), "bad-shape"),
        (msg({f"t{i}": np.zeros(20, np.uint8) for i in range(10)}), "oversized"),
    ],
)
def test_encode_rejects_what_decode_would(m: Message, why: str) -> None:
    with pytest.raises(CodecError) as info:
        encode(m, max_bytes=256)
    assert info.value.reason == why


def test_error_names_the_field_at_fault() -> None:
    with pytest.raises(CodecError, match="'weights'"):
        encode(msg({"weights": np.array([np.inf])}))
    with pytest.raises(CodecError, match=r"meta\.cfg\.lr"):
        encode(msg(meta={"cfg": {"lr": float("nan")}}))


# ------------------------------------------------------------------ fuzzing

VALID = encode(small())
FUZZ = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decode_or_codec_error(data: bytes) -> None:
    try:
        out = decode(data)
    except CodecError as exc:
        assert exc.reason
    else:
        assert isinstance(out, Message)


@FUZZ
@given(st.binary(max_size=64))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    decode_or_codec_error(data)


@FUZZ
@given(st.binary(max_size=64))
def test_fuzz_arbitrary_bytes_after_valid_prefix(tail: bytes) -> None:
    decode_or_codec_error(MAGIC + b"\x01" + tail)


@FUZZ
@given(st.lists(st.integers(0, len(VALID) * 8 - 1), min_size=1, max_size=8))
def test_fuzz_bit_flips(bits: list[int]) -> None:
    data = bytearray(VALID)
    for bit in bits:
        data[bit // 8] ^= 1 << (bit % 8)
    decode_or_codec_error(bytes(data))


@FUZZ
@given(st.integers(0, len(VALID)), st.integers(0, len(VALID)), st.binary(max_size=16))
def test_fuzz_splices(start: int, stop: int, insert: bytes) -> None:
    start, stop = min(start, stop), max(start, stop)
    decode_or_codec_error(VALID[:start] + insert + VALID[stop:])
