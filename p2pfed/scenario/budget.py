"""Will a scenario fit in memory? A lower-bound estimate per field, checked before anything runs.

Why: the schema bounds each number on its own, but memory grows with products of them (rounds,
devices, layer widths, simulated steps). A run that cannot fit must be refused at once, naming
the field, instead of failing hours later with an allocator's traceback or silently swapping.

Every estimate here is a deliberate *lower bound* (the bytes the named structure needs at the
least, ignoring Python's and PyTorch's overheads), so a refusal is certain to be right; a run
that passes may still need more. The number of devices is known without reading data for the
synthetic set and the packaged WISDM file (36 users, or ``dataset.users``); a user's own WISDM
file is assumed to hold WISDM's 36 users unless ``dataset.users`` says how many.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from p2pfed.algorithms import Algorithm, MemoryFacts, MemoryTerm, Options
from p2pfed.scenario.schema import Scenario
from p2pfed.scenario.spec import RunSpec

WISDM_USERS = 36
WISDM_FEATURES, WISDM_RAW_FEATURES, WISDM_CLASSES = 43, 3, 6
DEFAULT_CONTACT_DURATION_S = 3600.0   # what the contact builders use when duration_s is unset

FLOAT32, FLOAT64 = 4, 8
MODEL_COPIES = 3            # weights, gradients and at least one copy received from a peer
ROUND_TALLY_BYTES = 400     # one round's traffic counters in the recorder
EVALUATION_ROW_BYTES = 500  # one rounds.csv row held until the results are written
NUMPY_ARRAY_HEADER = 112   # sys.getsizeof of an empty numpy array
# Random waypoint, per position sample: its time twice (float64) and the four arrays of pairs
# that enter or leave range, kept until the contacts are assembled. Pairs in range come from a
# k-d tree (network/contacts/mobility.py), so nothing grows with devices x devices any more.
WAYPOINT_STEP_BYTES = 2 * FLOAT64 + 4 * NUMPY_ARRAY_HEADER
CONTACT_BYTES = 150         # one Contact record


def device_count(sc: Scenario) -> int:
    """The federation's size as far as it is known before reading data (see the module doc)."""
    ds = sc.dataset
    if ds.name == "synthetic":
        return ds.synthetic.num_devices
    return len(set(ds.users)) if ds.users else WISDM_USERS


def _features_and_classes(sc: Scenario) -> tuple[int, int]:
    ds = sc.dataset
    if ds.name == "synthetic":
        return ds.synthetic.num_features, ds.synthetic.num_classes
    if ds.name == "wisdm" and ds.features is not None:
        return len(ds.features), WISDM_CLASSES
    return (WISDM_RAW_FEATURES if ds.name == "wisdm-raw" else WISDM_FEATURES), WISDM_CLASSES


def model_parameters(sc: Scenario) -> int:
    """Weights and biases of the scenario's MLP."""
    features, classes = _features_and_classes(sc)
    sizes = [features, *sc.model.hidden, classes]
    return sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:]))


def estimates(sc: Scenario, method: type[Algorithm], options: Options) -> list[MemoryTerm]:
    """The lower-bound memory of each structure whose size a scenario field drives; ``method``
    (the scenario's, with its validated ``options``) sizes the structures only it builds."""
    n = device_count(sc)
    out = []
    if sc.model.name == "mlp":   # a model of the user's own is sized once built (engine.footprint)
        params = model_parameters(sc)
        out.append(MemoryTerm("model.hidden", n * params * FLOAT32 * MODEL_COPIES,
                              f"{n} devices × {params:.3g} parameters × {MODEL_COPIES} copies × {FLOAT32} bytes"))
    out += method.memory_terms(options, MemoryFacts(devices=n, hidden=tuple(sc.model.hidden)))
    if sc.dataset.name == "synthetic":
        s = sc.dataset.synthetic
        held = s.classes_per_device or s.num_classes
        values = s.num_devices * held * s.samples_per_class * s.num_features
        out.append(MemoryTerm("dataset.synthetic", values * FLOAT64,
                              f"num_devices × classes held × samples_per_class × num_features = "
                              f"{values:.3g} float64 values"))
    if sc.contacts.kind == "none":
        evaluations = sc.rounds / sc.evaluation.every
        out.append(MemoryTerm("rounds", sc.rounds * ROUND_TALLY_BYTES + evaluations * EVALUATION_ROW_BYTES,
                              f"{sc.rounds:.3g} rounds of traffic tallies and {evaluations:.3g} evaluation rows"))
        return out
    c = sc.contacts
    duration = c.duration_s or DEFAULT_CONTACT_DURATION_S
    pairs = n * (n - 1) / 2
    if c.kind == "random-waypoint":
        steps = duration / c.step_s + 1
        out.append(MemoryTerm("contacts.step_s", steps * WAYPOINT_STEP_BYTES,
                              f"contacts.duration_s / contacts.step_s = {steps:.3g} position samples × "
                              f"{WAYPOINT_STEP_BYTES} bytes"))
    elif c.kind == "poisson":
        contacts = pairs * duration / (c.mean_intercontact_s + c.mean_duration_s)
        out.append(MemoryTerm("contacts.mean_intercontact_s", contacts * CONTACT_BYTES,
                              f"about {contacts:.3g} contacts ({pairs:.3g} device pairs over "
                              f"contacts.duration_s = {duration:g} s)"))
    if sc.evaluation.every_s is not None:
        evaluations = duration / sc.evaluation.every_s
        out.append(MemoryTerm("evaluation.every_s", evaluations * EVALUATION_ROW_BYTES,
                              f"{evaluations:.3g} evaluation rows"))
    return out


def available_memory() -> int | None:
    """This machine's physical memory, or the container's limit when lower (None: unknown)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return total


def memory_problems(loaded: RunSpec, available: int | None = None) -> list[str]:
    """One 'file: field: problem' line per structure that alone would not fit in ``available``
    bytes (None: this machine's memory)."""
    available = available_memory() if available is None else available
    if available is None:
        return []
    return [f"{loaded.source}: {e.field}: the run would need at least {format_bytes(e.nbytes)} of memory "
            f"({e.what}), more than the {format_bytes(available)} this machine has"
            for e in estimates(loaded.scenario, loaded.method, loaded.options) if e.nbytes > available]


def format_bytes(n: float) -> str:
    if not math.isfinite(n):
        return f"{n} bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"
