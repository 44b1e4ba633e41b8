"""The scenario reference page (``docs/reference/scenario.md``), generated from the schema.

Per section a table of every field (key, type, allowed values or bounds, default, description),
all read from the pydantic models (:mod:`p2pfed.scenario.fields`); then each shipped method's
options from its ``Options`` class, the peer, faults and sweep files from theirs, and the device
classes and radio presets from their tables in :mod:`p2pfed.energy`. Prose that belongs to no
single field (file formats, results, how a runtime counts) is hand-written in ``notes/*.md``
next to this module and placed after the section it explains.
"""

from __future__ import annotations

import sys
from importlib import resources

from pydantic import BaseModel

from p2pfed.algorithms import ALGORITHMS
from p2pfed.docs_gen.markdown import code, first_paragraph, table
from p2pfed.energy.profiles import MEASURED, ROLES
from p2pfed.energy.radio import RADIOS
from p2pfed.peer.config import PeerConfig
from p2pfed.peer.faults import Faults
from p2pfed.scenario.fields import FieldDoc, method_options, model_fields
from p2pfed.scenario.schema import AlgorithmSection, Scenario
from p2pfed.sweeps.spec import SweepSpec

HEADER = ("key", "type", "allowed", "default", "description")
GENERATED = ("<!-- Generated from the code by `python -m p2pfed.docs_gen`: edit the schema or p2pfed/docs_gen, "
             "not this file. -->")


def note(name: str) -> str:
    """The hand-written note ``notes/<name>.md``, or nothing when there is none."""
    path = resources.files("p2pfed.docs_gen") / "notes" / f"{name}.md"
    return path.read_text(encoding="utf-8").strip() if path.is_file() else ""


def allowed(doc: FieldDoc) -> str:
    values = ", ".join(code(v) for v in doc.allowed)
    return "; ".join(part for part in (values, doc.bounds) if part)


def rows(docs: list[FieldDoc]) -> list[tuple[str, ...]]:
    return [(code(d.path.rsplit(".", 1)[-1]), d.type_name, allowed(d),
             "" if not d.default else d.default if d.default == "required" else code(d.default),
             d.description) for d in docs]


def section(path: str, model: type[BaseModel], level: int, intro: str,
            extras: dict[str, list[str]]) -> list[str]:
    """A section's heading, intro, table, the sections it holds, its note, then ``extras[path]``."""
    docs = model_fields(model, f"{path}." if path else "")
    out = [f"{'#' * level} {code(path) if path else 'Top level'}", intro] if intro else \
        [f"{'#' * level} {code(path) if path else 'Top level'}"]
    shown = [d for d in docs if not d.nested]
    if shown:
        out.append(table(HEADER, rows(shown)))
    for d in docs:
        if d.section is None:
            continue
        listed = d.type_name.startswith("list")
        kind = "" if d.nested else " Each entry holds:" if listed else " As a mapping it holds:"
        out += section(d.path, d.section, min(level + 1, 3) if path else 2, d.description + kind, extras)
    return [*out, note(path or "top"), *extras.get(path, [])]


def methods() -> list[str]:
    """One section per shipped method, the default first: what it is (its docstring), its
    options, its note."""
    out = []
    default = AlgorithmSection.model_fields["name"].default
    for name in sorted(ALGORITHMS, key=lambda n: (n != default, n)):
        cls = ALGORITHMS[name]
        summary = first_paragraph(cls.__doc__) or first_paragraph(sys.modules[cls.__module__].__doc__)
        docs = method_options(name)
        out += [f"### {code(name)}", summary,
                table(HEADER, rows(docs)) if docs else "No options.", note(f"method-{name}")]
    return out


def device_classes() -> str:
    """The named device classes: each a measured device's rate and power."""
    aliases = {device: [role for role, d in ROLES.items() if d == device] for device in ROLES.values()}
    return table(("class", "device measured", "`flops_per_s`", "`joules_per_flop`", "power (W)"),
                 [(", ".join(code(n) for n in [m.name, *aliases.get(m.name, [])]), m.device,
                   f"{m.gflops * 1e9:.4g}", f"{m.watts / (m.gflops * 1e9):.3g}", f"{m.watts:g}") for m in MEASURED])


def radio_presets() -> str:
    """The radio presets' figures."""
    return table(("radio", "J per byte sent", "J per byte received", "idle W", "tail W", "tail s"),
                 [(code(r.name), f"{r.send_j_per_byte:.4g}", f"{r.receive_j_per_byte:.4g}", f"{r.idle_w:.3g}",
                   f"{r.tail_w:.4g}", f"{r.tail_s:.4g}") for r in RADIOS.values()])


def file_section(title: str, name: str, model: type[BaseModel]) -> list[str]:
    """A file p2pfed reads besides scenarios (peer, faults, sweep): intro, tables, note."""
    out = [f"## {title}", note(f"{name}-intro"), table(HEADER, rows(model_fields(model)))]
    for d in model_fields(model):
        if d.section is not None:
            lead = "Each entry of" if d.type_name.startswith("list") else "The mapping"
            out += [f"{lead} {code(d.path)}:", table(HEADER, rows(model_fields(d.section)))]
    return [*out, note(name)]


def render() -> str:
    """The whole page."""
    parts = [GENERATED, "# Scenario reference", note("intro")]
    extras = {"algorithm": methods(),
              "devices": ["### Device classes", device_classes(), note("devices-classes"),
                          "### Radio presets", radio_presets(), note("devices-figures")]}
    parts += section("", Scenario, 2, "The keys at the top of a scenario file.", extras)
    parts += [note("results")]
    parts += file_section("Peer files (`p2pfed peer --config peer.yaml`)", "peer", PeerConfig)
    parts += file_section("Faults files (emulated LAN)", "faults", Faults)
    parts += file_section("Sweep files (`p2pfed sweep SWEEP.yaml`)", "sweep", SweepSpec)
    return "\n\n".join(p for p in parts if p) + "\n"
