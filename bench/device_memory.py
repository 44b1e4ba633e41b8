"""What a device holds between rounds, by structure: walk every device's method after a few rounds.

Runs the synthetic federation of ``bench/scale.py`` in this process through the synchronous
runtime, stops at a round boundary (the round's messages delivered, the next round not started)
and walks each device's ``Algorithm`` — its context's data and model, its cache of received
payloads (the decoded arrays, what its method parsed from them, the memo shared by a broadcast's
receivers) and the method's own attributes — plus the runtime's links, summing the bytes of every
numpy array, torch tensor and byte buffer reached. An allocation reached twice (a broadcast's
frame cached by all its receivers, a view of another array, a tensor over a message's bytes) is
counted once, under the structure holding the larger buffer (of equal ones, the first that
reached it); the table gives the bytes per device of each structure.

    python bench/device_memory.py --devices 1000 --methods gossip-avg,fedsub --rounds 3 \\
        --set 'model.hidden=[128,512]'
"""

from __future__ import annotations

import argparse
import bisect
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from scale import SCENARIO, federation_overrides

MIB = 2**20
_SKIP = (type, type(len), type(lambda: 0), torch.Generator, np.random.Generator, str, int, float, bool,
         type(None), torch.dtype)


def _buffer(obj: Any) -> tuple[int, int] | None:
    """(start address, bytes) of the allocation that holds ``obj``'s data (a view's owner's)."""
    if isinstance(obj, torch.Tensor):
        s = obj.untyped_storage()
        return s.data_ptr(), s.nbytes()
    if isinstance(obj, np.ndarray):
        root = obj
        while isinstance(root.base, np.ndarray):
            root = root.base
        owner = root.base
        if isinstance(owner, memoryview):
            owner = owner.obj
        if isinstance(owner, (bytes, bytearray)):
            return np.frombuffer(owner, dtype=np.uint8).ctypes.data if len(owner) else id(owner), len(owner)
        return root.ctypes.data if root.nbytes else id(root), root.nbytes
    if isinstance(obj, (bytes, bytearray)) and len(obj) > 64:
        return np.frombuffer(obj, dtype=np.uint8).ctypes.data, len(obj)
    return None


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield "", k
            yield "", v
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            yield "", v
    elif isinstance(obj, torch.nn.Module):
        for n, p in obj.named_parameters():
            yield "", p
            if p.grad is not None:
                yield ".grad", p.grad
        for _, b in obj.named_buffers():
            yield "", b
    else:
        d = getattr(obj, "__dict__", None)
        if d is not None:
            for k, v in d.items():
                yield f".{k}", v
        for k in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, k):
                yield f".{k}", getattr(obj, k)


class Walker:
    """Sums distinct buffers per structure name. A buffer that lies inside another one reached
    in any walk (a view, a tensor over a message's bytes) is counted once, under the structure
    that holds the larger; of two equal buffers, the first reached."""

    def __init__(self) -> None:
        self.buffers: list[tuple[int, int, str]] = []   # (start address, bytes, structure), in walk order

    def walk(self, obj: Any, name: str, visited: set[int], depth: int = 0) -> None:
        if isinstance(obj, _SKIP) or id(obj) in visited or depth > 40:
            return
        visited.add(id(obj))
        buf = _buffer(obj)
        if buf is not None:
            self.buffers.append((*buf, name))
            if isinstance(obj, (torch.Tensor, bytes, bytearray)):
                return
        for suffix, child in _children(obj):
            self.walk(child, name + (".grad" if suffix == ".grad" else ""), visited, depth + 1)

    @property
    def bytes(self) -> dict[str, int]:
        """Bytes per structure, each allocation once (largest first: what lies inside is not added)."""
        starts: list[int] = []
        ends: list[int] = []
        out: dict[str, int] = defaultdict(int)
        for addr, size, name in sorted(self.buffers, key=lambda b: -b[1]):   # stable: walk order on ties
            i = bisect.bisect_right(starts, addr) - 1
            if i >= 0 and addr + size <= ends[i]:
                continue
            starts.insert(i + 1, addr)
            ends.insert(i + 1, addr + size)
            out[name] += size
        return out


def device_parts(algo: Any) -> Iterator[tuple[str, Any]]:
    """A device's structures, by name."""
    ctx = algo.ctx
    yield "model", ctx.model
    yield "data (numpy + tensors)", [ctx.device, ctx._x_all, ctx._y_all, ctx._x_test_all, ctx._y_test_all,
                                     ctx.x_train, ctx.y_train, ctx.x_test, ctx.y_test]
    for item in algo.cache.values():
        yield "cache: received arrays (frame bytes)", item.payload.tensors
    for item in algo.cache.values():
        yield "cache: parsed by the method", item.parsed
    for item in algo.cache.values():
        yield "cache: payload memo (shared per frame)", item.payload.memo
    for k, v in vars(algo).items():
        if k not in ("ctx", "cache", "options", "clusterings"):
            yield f"method: {k}", v


def measure(method: str, devices: int, rounds: int, sets: list[str]) -> tuple[dict[str, int], int, int]:
    """Bytes per structure over all devices, one model's bytes, and the footprint estimate's
    bytes per device (``engine/footprint.py``)."""
    from p2pfed.device import full_model_bytes
    from p2pfed.engine.footprint import estimate_memory, expected_degree
    from p2pfed.engine.rounds_build import rounds_simulation
    from p2pfed.results.recorder import Recorder
    from p2pfed.scenario.build import build_algorithms
    from p2pfed.scenario.loader import load_scenario, with_algorithm

    loaded = with_algorithm(load_scenario(SCENARIO, federation_overrides(devices, rounds + 1) + sets), method)
    algorithms = build_algorithms(loaded)
    sim = rounds_simulation(loaded, algorithms, Recorder(devices), class_schedule=None)
    sim.run(until_round=rounds)
    w = Walker()
    for algo in algorithms:
        visited: set[int] = set()
        for name, obj in device_parts(algo):
            w.walk(obj, name, visited)
    w.walk([t.data for t in sim.in_flight.values()], "runtime: frames in flight", set())
    w.walk(algorithms[0].ctx.shared, "runtime: shared memo tables", set())
    model = algorithms[0].ctx.model
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    data_bytes = sum(a.nbytes for d in loaded.federation.devices for a in (d.x_train, d.y_train, d.x_test, d.y_test))
    estimate = estimate_memory(devices, data_bytes, model_bytes, full_model_bytes(model),
                               expected_degree(loaded, devices) or 0.0, loaded.method, loaded.options)
    sim.close()
    return dict(w.bytes), model_bytes, estimate.per_device_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--methods", default="gossip-avg,fedsub")
    ap.add_argument("--rounds", type=int, default=3, help="rounds run before the walk")
    ap.add_argument("--set", action="append", default=[], help="extra scenario override key=value")
    args = ap.parse_args()
    for method in args.methods.split(","):
        parts, model_bytes, estimated = measure(method, args.devices, args.rounds, args.set)
        total = sum(parts.values())
        print(f"\n{method}, {args.devices} devices, after {args.rounds} rounds "
              f"(one model: {model_bytes / MIB:.3f} MiB)")
        print(f"  {'structure':48s} {'MiB/device':>10s} {'models':>7s}")
        for name, b in sorted(parts.items(), key=lambda kv: -kv[1]):
            per = b / args.devices
            print(f"  {name:48s} {per / MIB:10.3f} {per / model_bytes:7.2f}")
        print(f"  {'total':48s} {total / args.devices / MIB:10.3f} {total / args.devices / model_bytes:7.2f}")
        print(f"  {'estimate (engine/footprint.py), overheads included':48s} {estimated / MIB:10.3f} "
              f"{estimated / model_bytes:7.2f}")


if __name__ == "__main__":
    main()
