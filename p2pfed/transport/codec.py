"""The one wire codec for every message between devices.

Why one codec: byte counts reported in results are ``len(encode(msg))``, so the
simulator and real peers must pay for exactly the same bytes. Why not pickle:
peers are untrusted, so the format is a tiny JSON header plus raw little-endian
buffers that are fully validated before any buffer is interpreted.

Layout::

    b"P2PF" | version (1 byte) | header length (uint32 LE) | header (UTF-8 JSON)
    | tensor buffers (C order, little-endian), concatenated in header order

Decoded tensors are **read-only zero-copy views** into the decoded blob; call
``.copy()`` to get a writable array. If a mutable buffer (``bytearray``) was
passed to :func:`decode`, the caller must not mutate it while the arrays live.
"""

from __future__ import annotations

import functools
import json
import math
import re
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "ALLOWED_DTYPES",
    "CodecError",
    "DEFAULT_MAX_BYTES",
    "KIND_PATTERN",
    "MAGIC",
    "MAX_HEADER_BYTES",
    "MAX_NDIM",
    "Message",
    "VERSION",
    "decode",
    "encode",
    "encoded_size",
    "is_valid_kind",
]

MAGIC = b"P2PF"
VERSION = 1
DEFAULT_MAX_BYTES = 64 * 2**20
MAX_HEADER_BYTES = 1 * 2**20  # metadata is meant to be small; caps JSON work
MAX_NDIM = 8
MAX_META_DEPTH = 32  # nesting bound; also keeps json/our walk off the recursion limit
MAX_INT = 2**63 - 1  # sender/round must fit an int64 for other implementations

_PREFIX = struct.Struct("<4sBI")  # magic, version, header length
PREFIX_SIZE = _PREFIX.size  # 9

ALLOWED_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name).newbyteorder("<")
    for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
}
KIND_PATTERN = "[a-z0-9/_-]{1,64}"   # a message's kind: a method's name or message kind
_KIND_RE = re.compile(KIND_PATTERN)
_NAME_MAX = 256
_HEADER_FIELDS = frozenset({"kind", "sender", "round", "sent_at", "meta", "tensors"})
_TENSOR_FIELDS = frozenset({"name", "dtype", "shape"})


class CodecError(ValueError):
    """A message that cannot be encoded or decoded; ``reason`` is machine-readable."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)  # both args kept so the error can be re-raised/copied
        self.reason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


@dataclass(frozen=True)
class Message:
    """One unit exchanged between devices: routing fields, small metadata, raw tensors."""

    kind: str
    sender: int
    round: int
    sent_at: float
    meta: dict[str, Any]
    tensors: dict[str, np.ndarray]


# ---------------------------------------------------------------- validation


def _check_int(value: Any, field: str) -> int:
    if type(value) is not int and not isinstance(value, np.integer):
        raise CodecError("bad-header", f"{field} must be an int, got {type(value).__name__}")
    value = int(value)
    if not 0 <= value <= MAX_INT:
        raise CodecError("bad-header", f"{field} must be in [0, 2**63), got {value}")
    return value


def is_valid_kind(kind: object) -> bool:
    """Whether ``kind`` may name a message on the wire (``KIND_PATTERN``)."""
    return isinstance(kind, str) and _KIND_RE.fullmatch(kind) is not None


def _check_routing(kind: Any, sender: Any, round_: Any, sent_at: Any) -> tuple[str, int, int, float]:
    if not is_valid_kind(kind):
        raise CodecError("bad-header", f"kind must match {KIND_PATTERN}, got {kind!r:.80}")
    sender = _check_int(sender, "sender")
    round_ = _check_int(round_, "round")
    if isinstance(sent_at, bool) or not isinstance(sent_at, (int, float, np.floating, np.integer)):
        raise CodecError("bad-header", f"sent_at must be a number, got {type(sent_at).__name__}")
    sent_at = float(sent_at)
    if not math.isfinite(sent_at):
        raise CodecError("bad-header", f"sent_at must be finite, got {sent_at}")
    return kind, sender, round_, sent_at


def _check_meta(value: Any, path: str, depth: int = 0) -> None:
    """Reject anything JSON cannot carry faithfully (non-str keys, NaN, tuples, numpy scalars)."""
    if depth > MAX_META_DEPTH:
        raise CodecError("bad-header", f"{path} nested deeper than {MAX_META_DEPTH}")
    if value is None or isinstance(value, (bool, str)):
        return
    if type(value) is int:
        return
    if type(value) is float:
        if not math.isfinite(value):
            raise CodecError("bad-header", f"{path} is not finite ({value})")
        return
    if type(value) is list:
        for i, item in enumerate(value):
            _check_meta(item, f"{path}[{i}]", depth + 1)
        return
    if type(value) is dict:
        for key, item in value.items():
            if not isinstance(key, str):
                raise CodecError("bad-header", f"{path} has non-str key {key!r:.40}")
            _check_meta(item, f"{path}.{key}", depth + 1)
        return
    raise CodecError("bad-header", f"{path} has non-JSON type {type(value).__name__}")


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= _NAME_MAX:
        raise CodecError("bad-header", f"tensor name must be a str of 1..{_NAME_MAX} chars, got {name!r:.80}")
    return name


@functools.lru_cache(maxsize=64)
def _dtype_name(dtype: np.dtype) -> str:
    """``dtype.name``, which numpy computes anew (microseconds) on every access."""
    return dtype.name


def _check_dtype(name: str, dtype: Any) -> np.dtype:
    if not isinstance(dtype, str) or dtype not in ALLOWED_DTYPES:
        raise CodecError("bad-dtype", f"tensor {name!r}: dtype {dtype!r:.40} not in {sorted(ALLOWED_DTYPES)}")
    return ALLOWED_DTYPES[dtype]


def _check_shape(name: str, shape: Any, itemsize: int, max_bytes: int) -> tuple[tuple[int, ...], int]:
    """Return (shape, nbytes); a tensor that alone exceeds max_bytes is a bad shape."""
    if not isinstance(shape, (list, tuple)) or len(shape) > MAX_NDIM:
        raise CodecError("bad-shape", f"tensor {name!r}: shape must be a list of <= {MAX_NDIM} ints")
    nbytes = itemsize
    for dim in shape:
        if type(dim) is not int or dim < 0:
            raise CodecError("bad-shape", f"tensor {name!r}: dims must be non-negative ints, got {shape!r:.80}")
        nbytes *= dim
    if nbytes > max_bytes:
        raise CodecError("bad-shape", f"tensor {name!r}: shape {shape!r:.80} needs {nbytes} bytes > max {max_bytes}")
    return tuple(shape), nbytes


def _check_finite(name: str, array: np.ndarray) -> None:
    if array.dtype.kind == "f" and array.size and not np.isfinite(array).all():
        raise CodecError("not-finite", f"tensor {name!r} contains NaN or inf")


# ---------------------------------------------------------------- encode


def _prepare(msg: Message, max_bytes: int, require_finite: bool) -> tuple[bytes, list[np.ndarray], int]:
    """Validate ``msg`` exactly as decode would; return (prefix+header, LE buffers, total size)."""
    if not isinstance(msg, Message):
        raise CodecError("bad-header", f"expected Message, got {type(msg).__name__}")
    kind, sender, round_, sent_at = _check_routing(msg.kind, msg.sender, msg.round, msg.sent_at)
    if type(msg.meta) is not dict:
        raise CodecError("bad-header", f"meta must be a dict, got {type(msg.meta).__name__}")
    _check_meta(msg.meta, "meta")
    if type(msg.tensors) is not dict:
        raise CodecError("bad-header", f"tensors must be a dict, got {type(msg.tensors).__name__}")
    specs: list[dict[str, Any]] = []
    buffers: list[np.ndarray] = []
    payload = 0
    for name, array in msg.tensors.items():
        _check_name(name)
        if not isinstance(array, np.ndarray):
            raise CodecError("bad-dtype", f"tensor {name!r} is {type(array).__name__}, expected numpy.ndarray")
        dtype_name = _dtype_name(array.dtype)
        dtype = _check_dtype(name, dtype_name)
        shape, nbytes = _check_shape(name, list(array.shape), dtype.itemsize, max_bytes)
        if require_finite:
            _check_finite(name, array)
        buffers.append(np.ascontiguousarray(array, dtype=dtype))
        specs.append({"name": name, "dtype": dtype_name, "shape": list(shape)})
        payload += nbytes
    header = {"kind": kind, "sender": sender, "round": round_, "sent_at": sent_at, "meta": msg.meta, "tensors": specs}
    header_bytes = json.dumps(header, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    if len(header_bytes) > MAX_HEADER_BYTES:
        raise CodecError("oversized", f"header is {len(header_bytes)} bytes > {MAX_HEADER_BYTES}")
    total = PREFIX_SIZE + len(header_bytes) + payload
    if total > max_bytes:
        raise CodecError("oversized", f"message is {total} bytes > max_bytes {max_bytes}")
    return _PREFIX.pack(MAGIC, VERSION, len(header_bytes)) + header_bytes, buffers, total


def encode(msg: Message, *, max_bytes: int = DEFAULT_MAX_BYTES, require_finite: bool = True) -> bytes:
    """Serialise ``msg``; raises CodecError for anything :func:`decode` would reject."""
    head, buffers, _ = _prepare(msg, max_bytes, require_finite)
    # bytes.join copies each buffer once, straight from the (contiguous, LE) arrays.
    # numpy's stubs make ndarray a Buffer only on Python >= 3.12
    return b"".join([head, *(b.reshape(-1).view(np.uint8) for b in buffers)])  # type: ignore[list-item]


def encoded_size(msg: Message, *, max_bytes: int = DEFAULT_MAX_BYTES, require_finite: bool = True) -> int:
    """``len(encode(msg))`` without copying tensor buffers (validates identically)."""
    return _prepare(msg, max_bytes, require_finite)[2]


# ---------------------------------------------------------------- decode


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise CodecError("bad-header", f"duplicate JSON key {key!r:.40}")
        obj[key] = value
    return obj


def _reject_constant(token: str) -> Any:
    raise CodecError("bad-header", f"JSON constant {token} is not allowed")


def _parse_header(raw: memoryview) -> dict[str, Any]:
    try:
        header = json.loads(
            str(raw, "utf-8"),
            object_pairs_hook=_reject_duplicate_keys,
            parse_constant=_reject_constant,
        )
    except CodecError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, int-digit limit
        raise CodecError("bad-header", f"header is not UTF-8 JSON ({type(exc).__name__})") from None
    if type(header) is not dict:
        raise CodecError("bad-header", f"header must be a JSON object, got {type(header).__name__}")
    keys = set(header)
    if keys != _HEADER_FIELDS:
        raise CodecError(
            "bad-header",
            f"header fields: missing {sorted(_HEADER_FIELDS - keys)}, unknown {sorted(keys - _HEADER_FIELDS)[:5]}",
        )
    return header


def _read_prefix(view: memoryview, max_bytes: int) -> int:
    """Check the blob's size, magic, version and header length; return the header length."""
    size = view.nbytes
    if size > max_bytes:
        raise CodecError("oversized", f"message is {size} bytes > max_bytes {max_bytes}")
    if size < PREFIX_SIZE:
        if bytes(view[:4]) != MAGIC[: min(size, 4)]:
            raise CodecError("bad-magic", "blob does not start with b'P2PF'")
        raise CodecError("truncated", f"blob is {size} bytes, shorter than the {PREFIX_SIZE}-byte prefix")
    magic, version, header_len = _PREFIX.unpack_from(view)
    if magic != MAGIC:
        raise CodecError("bad-magic", f"blob starts with {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise CodecError("bad-version", f"version {version}, expected {VERSION}")
    if header_len > MAX_HEADER_BYTES:
        raise CodecError("oversized", f"header length {header_len} > {MAX_HEADER_BYTES}")
    if PREFIX_SIZE + header_len > size:
        raise CodecError("truncated", f"header length {header_len} runs past the {size}-byte blob")
    return int(header_len)


_Layout = list[tuple[str, np.dtype, tuple[int, ...], int]]


def _tensor_layout(specs: Any, max_bytes: int) -> tuple[_Layout, int]:
    """Validate the header's tensor specs; return (name, dtype, shape, nbytes) per tensor and their total."""
    if type(specs) is not list:
        raise CodecError("bad-header", f"tensors must be a JSON list, got {type(specs).__name__}")
    layout: _Layout = []
    seen: set[str] = set()
    payload = 0
    for i, spec in enumerate(specs):
        if type(spec) is not dict or set(spec) != _TENSOR_FIELDS:
            raise CodecError("bad-header", f"tensors[{i}] must be an object with exactly {sorted(_TENSOR_FIELDS)}")
        name = _check_name(spec["name"])
        if name in seen:
            raise CodecError("bad-header", f"duplicate tensor name {name!r}")
        seen.add(name)
        dtype = _check_dtype(name, spec["dtype"])
        shape, nbytes = _check_shape(name, spec["shape"], dtype.itemsize, max_bytes)
        layout.append((name, dtype, shape, nbytes))
        payload += nbytes
    return layout, payload


def _tensor_views(view: memoryview, offset: int, layout: _Layout, require_finite: bool) -> dict[str, np.ndarray]:
    """Read-only arrays over the buffers that start at ``offset``, in header order."""
    tensors: dict[str, np.ndarray] = {}
    for name, dtype, shape, nbytes in layout:
        if nbytes:
            array = np.frombuffer(view, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).reshape(shape)
        else:  # frombuffer rejects count=0 at the end of the buffer
            array = np.empty(shape, dtype=dtype)
        array.flags.writeable = False
        if require_finite:
            _check_finite(name, array)
        tensors[name] = array
        offset += nbytes
    return tensors


def decode(
    data: bytes | bytearray | memoryview,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    require_finite: bool = True,
) -> Message:
    """Parse and fully validate one blob; arrays are read-only views into ``data``."""
    try:
        view = memoryview(data).cast("B")
    except TypeError as exc:
        raise CodecError("bad-header", f"data must be a contiguous bytes-like object ({exc})") from None
    header_len = _read_prefix(view, max_bytes)
    header = _parse_header(view[PREFIX_SIZE : PREFIX_SIZE + header_len])

    kind, sender, round_, sent_at = _check_routing(header["kind"], header["sender"], header["round"], header["sent_at"])
    meta = header["meta"]
    if type(meta) is not dict:
        raise CodecError("bad-header", f"meta must be a JSON object, got {type(meta).__name__}")
    _check_meta(meta, "meta")
    layout, payload = _tensor_layout(header["tensors"], max_bytes)
    remaining = view.nbytes - PREFIX_SIZE - header_len
    if payload > remaining:
        raise CodecError("truncated", f"tensors need {payload} bytes, only {remaining} follow the header")
    if payload < remaining:
        raise CodecError("trailing-bytes", f"{remaining - payload} unexpected bytes after the tensors")
    tensors = _tensor_views(view, PREFIX_SIZE + header_len, layout, require_finite)
    return Message(kind=kind, sender=sender, round=round_, sent_at=sent_at, meta=meta, tensors=tensors)
