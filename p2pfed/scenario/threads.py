"""How many threads PyTorch uses: ``engine.torch_threads`` resolved for the process at hand.

A synchronous round trains every device as one batched computation, large enough to keep every
core busy, so a simulation of rounds uses all the cores it may (``auto``). Everything else gets
one thread: the contact runtime, which steps one device at a time on products far too small to
split (and where OpenMP's waiting threads, once another job shared the cores, made 600 simulated
seconds of ``scenarios/synthetic-rwp-1000.yaml`` take over 10 minutes, against 26 s with one
thread even under a profiler), a sweep worker (one cell per core; the worker sets
``WORKER_THREADS_ENV``) and a real peer (``p2pfed launch`` starts many on one machine). Results
can differ in float rounding between thread counts: PyTorch's CPU matrix products mostly split
work over output blocks, but not always, and a long run carries a last-digit difference on (a
test checks that a short small run is identical; a longer one need not be).
"""

from __future__ import annotations

import os

WORKER_THREADS_ENV = "P2PFED_TORCH_THREADS"   # set by a process that runs beside others like it


def machine_cores() -> int:
    """Cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def torch_threads(setting: int | str, *, batched: bool = True) -> int:
    """The thread count for ``engine.torch_threads`` (an int, or ``"auto"``); ``batched``: the
    process computes many devices at once (synchronous rounds), not one device at a time."""
    if setting != "auto":
        return int(setting)
    if not batched:
        return 1
    from_env = os.environ.get(WORKER_THREADS_ENV, "")
    return int(from_env) if from_env.isdigit() and int(from_env) > 0 else machine_cores()


def apply_torch_threads(setting: int | str, *, batched: bool = True) -> int:
    """Set PyTorch's intra-op threads for ``setting``; returns the count."""
    import torch

    count = torch_threads(setting, batched=batched)
    torch.set_num_threads(count)
    return count


def offload_helper_wanted(setting: bool | str) -> bool:
    """Whether a contact run with batch windows starts a helper process for the work methods
    offload (``engine.offload``): ``auto`` when a second core is free, i.e. the machine has two
    or more and this process is not one of several sweep workers sharing them."""
    if setting != "auto":
        return bool(setting)
    return machine_cores() >= 2 and not os.environ.get(WORKER_THREADS_ENV)
