"""Reading, overriding and validating scenario files, with one clear line per problem.

Relative paths inside a scenario (``dataset.path``, ``topology.file``, ``contacts.file``) are
resolved against the scenario file's own folder, so a scenario runs the same from any working
directory.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import ValidationError

from p2pfed.algorithms import Algorithm, Attacker, Options, RunFacts, algorithm_class, attack_class
from p2pfed.learning.model import ModelFactory, model_factory
from p2pfed.learning.units import UNIT_MODELS
from p2pfed.plugins import check_importable, is_plugin_name, loaded_code
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.schema import ATTACK_KINDS, AlgorithmSection, Scenario
from p2pfed.scenario.spec import RunSpec
from p2pfed.scenario.swap import Swap, swap_method
from p2pfed.textfile import read_text
from p2pfed.yamltext import load_yaml

DEFAULT_SCENARIO = "quickstart.yaml"


def embedded_default_text() -> str:
    return resources.files("p2pfed.scenario").joinpath(DEFAULT_SCENARIO).read_text()


def load_scenario(path: str | Path | None = None, overrides: Sequence[str] | None = None,
                  seed: int | None = None, values: Mapping[str, Any] | None = None, *,
                  method: type[Algorithm] | None = None) -> RunSpec:
    """Load ``path`` (or the embedded quickstart), apply ``--set`` overrides and ``--seed``, validate.

    An override of ``algorithm.name`` swaps the method as ``--algorithm`` does: the file's
    options the new method does not know are left out (options also set by ``--set`` stay).
    ``method``: the class the resulting ``algorithm.name`` names, when the caller has resolved it
    already (with ``method_class``)."""
    if path is None:
        source, base_dir = "<embedded quickstart>", Path.cwd()
        raw = parse_yaml(embedded_default_text(), source)
    else:
        p = Path(path)
        source, base_dir = str(p), p.resolve().parent
        raw = read_yaml_file(p, "scenario file")
    return load_mapping(raw, source, base_dir, overrides, seed, values, method=method)


def load_mapping(raw: dict[str, Any], source: str, base_dir: Path, overrides: Sequence[str] | None = None,
                 seed: int | None = None, values: Mapping[str, Any] | None = None, *,
                 method: type[Algorithm] | None = None) -> RunSpec:
    """``load_scenario`` of a mapping already read (a scenario given as a dict from Python):
    ``source`` names it in errors, relative paths resolve against ``base_dir``. ``values``: typed
    changes, ``{"training.lr": 0.1}``, applied after the ``--set`` texts and as they are (no YAML)."""
    if not isinstance(raw, dict):
        raise ScenarioError([f"{source}: a scenario must be a mapping of keys, got {type(raw).__name__}"])
    raw = copy.deepcopy(raw)
    file_algorithm, file_model = _algorithm_name(raw), _model_name(raw)
    changes = [apply_override(raw, item, source) for item in overrides or []]
    changes += [set_value(raw, key, value, source) for key, value in (values or {}).items()]
    set_keys = {".".join(parts) for parts in changes}
    set_model = {parts[1] for parts in changes if len(parts) == 2 and parts[0] == "model"}
    if ["model"] in changes and isinstance(raw.get("model"), dict):   # the whole section given
        set_model.update(raw["model"])
    if _model_name(raw) != file_model and isinstance(raw.get("model"), dict):
        # Another model than the file's: the file's settings of its model are left out, those
        # given on the command line kept (as for another method's options).
        raw["model"] = {k: v for k, v in raw["model"].items() if k == "name" or k in set_model}
    if seed is not None:
        raw["seed"] = seed
    swap, cls = None, method
    name = _algorithm_name(raw)
    if name != file_algorithm and isinstance(raw.get("algorithm"), dict) and isinstance(name, str):
        try:
            cls = method_class(name, base_dir) if cls is None else cls
        except ValueError:
            pass   # an unknown name: validation reports it with the choices
        else:
            kept = {parts[1] for parts in changes if len(parts) == 2 and parts[0] == "algorithm"} - {"name"}
            swap = swap_method(raw, str(file_algorithm), cls, kept=kept,
                               forwarding_given="forwarding.parts" in set_keys)
    return build(raw, source, base_dir, swap, method=cls)


def with_algorithm(loaded: RunSpec, name: str) -> RunSpec:
    """The same scenario run with another method, keeping what it can (``swap_method``)."""
    return load_mapping(loaded.scenario.model_dump(), loaded.source, loaded.base_dir, values={"algorithm.name": name})


def method_class(name: str, base_dir: Path | None = None) -> type[Algorithm]:
    """The class a method's name (``algorithm.name``, a sweep's ``methods``) names, a user's file
    looked for in ``base_dir``: the one place a method's name becomes its class. An unknown name
    is a ValueError listing the choices."""
    return algorithm_class(name, [] if base_dir is None else [base_dir])


def model_factory_of(name: str, base_dir: Path | None = None) -> ModelFactory | None:
    """The factory ``model.name`` names (None: the built-in MLP), a user's file looked for in
    ``base_dir``: the one place a model's name becomes its factory. An unknown name is a
    ValueError naming the field."""
    return model_factory(name, [] if base_dir is None else [base_dir])


def _model_name(raw: dict[str, Any]) -> Any:
    model = raw.get("model")
    return model.get("name", "mlp") if isinstance(model, dict) else "mlp"


def _algorithm_name(raw: dict[str, Any]) -> Any:
    algo = raw.get("algorithm")
    return algo.get("name", AlgorithmSection.model_fields["name"].default) if isinstance(algo, dict) \
        else AlgorithmSection.model_fields["name"].default


def read_yaml_file(path: Path, what: str) -> dict[str, Any]:
    """A YAML mapping from ``path``; a missing, unreadable, binary or empty file is one clear line."""
    if not path.exists():
        raise ScenarioError([f"{path}: {what} not found"])
    try:
        text = read_text(path, what)
    except ValueError as exc:
        raise ScenarioError([str(exc)]) from None
    raw = parse_yaml(text, str(path))
    if not raw:
        raise ScenarioError([f"{path}: the {what} is empty (it must set at least one key)"])
    return raw


def parse_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError([f"{where}: invalid YAML: {problem}"]) from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ScenarioError([f"{source}: a scenario must be a mapping of keys, got {type(raw).__name__}"])
    return raw


def apply_override(raw: dict[str, Any], item: str, source: str) -> list[str]:
    """``key.sub=value`` (the command line's ``--set``): value parsed as YAML (numbers, booleans,
    lists), set in place; returns the key's parts."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ScenarioError([f"--set {item!r}: expected key.sub=value"])
    try:
        parsed = load_yaml(value)
    except yaml.YAMLError:
        parsed = value
    return set_value(raw, key.strip(), parsed, source)


def set_value(raw: dict[str, Any], key: str, value: Any, source: str) -> list[str]:
    """Set ``key.sub`` of a raw scenario to ``value``, as given, in place; returns the key's parts."""
    node = raw
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ScenarioError([f"{source}: --set {key}: {part!r} is not a section"])
        node = child
    node[parts[-1]] = copy.deepcopy(value)
    return parts


def describe_error(err: Mapping[str, Any]) -> str:
    """One pydantic error as 'field: problem (got value)'.

    A model-level check names the field it is about at the start of its message (e.g.
    'topology.file is required when ...'); that field is then the one reported."""
    loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
    if err["type"] == "extra_forbidden":
        return f"{loc}: unknown key"
    msg = err["msg"].removeprefix("Value error, ")
    if not err["loc"] or _names_its_field(msg):   # the message names the field itself
        return msg
    if err["type"] == "finite_number":
        msg = "must be a finite number (NaN and infinity are refused)"
    first = msg.split(" ", 1)
    if len(first) == 2 and first[0].startswith(f"{loc}."):
        loc, msg = first
    elif len(first) == 2 and first[0] == loc:
        msg = first[1]
    given = err.get("input")
    if err["type"] not in {"missing"} and not isinstance(given, (dict, list)) and given is not None:
        return f"{loc}: {msg} (got {given!r})"
    return f"{loc}: {msg}"


_TYPE_TAGS = {"int", "float", "str", "bool", "bytes", "none"}


def field_errors(errors: Sequence[Mapping[str, Any]], prefix: tuple = ()) -> list[dict[str, Any]]:
    """pydantic's errors, one per field: a value that fits no member of a union is reported once
    per member, with the member's type at the end of its location ('literal[...]', 'list[...]',
    'int'); those are merged into one error whose message lists what would fit."""
    merged: dict[tuple, dict[str, Any]] = {}
    for err in errors:
        loc = prefix + tuple(x for x in err["loc"] if not (isinstance(x, str) and ("[" in x or x in _TYPE_TAGS)))
        if loc in merged:
            first = merged[loc]
            first["msg"] = f"{first['msg']} or {err['msg'].removeprefix('Input should be ')}"
            first["type"] = "union"
        else:
            merged[loc] = {**err, "loc": loc}
    return list(merged.values())


def _names_its_field(msg: str) -> bool:
    """Whether a message starts with the scenario field it is about ('model.name: ...')."""
    head, sep, _ = msg.partition(": ")
    parts = head.split(".")
    return bool(sep) and len(parts) >= 2 and parts[0] in Scenario.model_fields and all(
        p.replace("_", "").isalnum() for p in parts)


def run_facts_of(scenario: Scenario) -> RunFacts:
    """What a method's options are checked against (``Options`` validators)."""
    return RunFacts(method=scenario.algorithm.name, rounds=scenario.device_rounds(),
                    model_name=scenario.model.name, mlp_layers=scenario.model.mlp_layers,
                    model_units=scenario.model.name in UNIT_MODELS,
                    batch_norm=not (scenario.model.name == "cnn" and scenario.model.options.get("batch_norm") is False))


def validate(raw: dict[str, Any], source: str, base_dir: Path) -> Scenario:
    """Validate a raw mapping; collect every problem, then raise them together."""
    return build(raw, source, base_dir).scenario


def build(raw: dict[str, Any], source: str, base_dir: Path, swapped: Swap | None = None, *,
          method: type[Algorithm] | None = None) -> RunSpec:
    """The run spec of a raw mapping: the schema, the method named (resolved to its class here,
    once, unless ``method`` is that class already), its options, the model factory and the files
    named, every problem collected and raised together."""
    problems: list[str] = []
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        problems += [f"{source}: {describe_error(e)}" for e in field_errors(exc.errors())]
        scenario = None
    algo = cast("dict[str, Any]", raw.get("algorithm")) if isinstance(raw.get("algorithm"), dict) else {}
    name = algo.get("name", "fedsub")
    cls = method
    if cls is None and isinstance(name, str):  # any other type is reported by the schema above
        try:
            cls = method_class(name, base_dir)
        except ValueError as exc:
            problems.append(f"{source}: {exc}" if str(exc).startswith("algorithm.name:")
                            else f"{source}: algorithm.name: {exc}")
    factory = None
    if scenario is not None:
        try:
            factory = model_factory_of(scenario.model.name, base_dir)
        except ValueError as exc:
            problems.append(f"{source}: {exc}")
    options = None
    if cls is not None:
        options, found = _method_options(cls, algo, scenario, source)
        problems += found
    problems += _missing_files(raw, source, base_dir)
    attacks = {} if scenario is None else _user_attacks(scenario, source, base_dir, problems)
    if problems or scenario is None or cls is None or options is None:
        raise ScenarioError(problems)
    return RunSpec(scenario, source, base_dir, cls, options, factory, swapped, attacks)


def _user_attacks(scenario: Scenario, source: str, base_dir: Path, problems: list[str]) -> dict[str, type[Attacker]]:
    """The classes of the attacks ``adversaries`` names that are not shipped kinds, resolved once
    (a name that resolves to none is one line in ``problems``)."""
    found: dict[str, type[Attacker]] = {}
    for i, adversary in enumerate(scenario.adversaries):
        for name in adversary.kinds:
            if name in ATTACK_KINDS or name in found:
                continue
            try:
                found[name] = attack_class(name, [base_dir])
            except ValueError as exc:
                detail = str(exc).removeprefix("adversaries.kind: ")
                problems.append(f"{source}: adversaries.{i}.kind: {detail}"
                                + ("" if ":" in name else f" (shipped: {', '.join(ATTACK_KINDS)})"))
    return found


def _method_options(cls: type[Algorithm], algo: dict[str, Any], scenario: Scenario | None,
                    source: str) -> tuple[Options | None, list[str]]:
    """The method's options validated against the scenario (None if they are not), the parts it
    may forward and the optional packages it needs: one 'file: field: problem' line each."""
    problems: list[str] = []
    name = algo.get("name", "fedsub")
    opts = {k: v for k, v in algo.items() if k != "name"}
    context = {"run": run_facts_of(scenario)} if scenario is not None else None
    try:
        options = cls.Options.model_validate(opts, context=context)
    except ValidationError as exc:
        known = ", ".join(cls.Options.model_fields) or "no options"
        problems += [f"{source}: {describe_error(e)}"
                     + (f" ({name} takes: {known})" if e["type"] == "extra_forbidden" else "")
                     for e in field_errors(exc.errors(), ("algorithm",))]
        options = None
    if scenario is not None and scenario.forwarding.enabled:
        unknown = [p for p in scenario.forwarding.parts if p not in cls.parts]
        if unknown:
            problems.append(f"{source}: forwarding.parts: {name} sends no part named "
                            f"{', '.join(map(repr, unknown))}; its parts: {', '.join(cls.parts)}")
    if options is not None:
        problems += [f"{source}: algorithm.name: {req.message(needed_by=str(name))}"
                     for req in cls.requirements(options) if not req.installed()]
    return options, problems


def launch_problems(loaded: RunSpec, *, check_imports: bool = True) -> list[str]:
    """What real peers (``p2pfed launch`` / ``peer``) cannot run that the simulator can, one
    'file: field: problem' line each; ``p2pfed validate --launch`` reports them too.
    ``check_imports``: load the user's code named in the scenario in a new process, as a launched
    peer will; a peer itself passes False (it is that process, and loading the scenario has
    imported the code already — 36 peers each starting a checking process at once on 2 cores
    timed out)."""
    sc, problems = loaded.scenario, []
    if sc.engine.participation < 1:
        problems.append(f"{loaded.source}: engine.participation: real peers always take part "
                        f"(got {sc.engine.participation}); set it to 1")
    if sc.contacts.kind != "none":   # real peers over contacts: what the simulator alone models is refused
        simulated_only = [("contacts.loss_rate", sc.contacts.loss_rate, "a lossy link is the network's "
                           "(p2pfed launch --network emulated --loss)"),
                          ("asynchronous.batch_window_s", sc.asynchronous.batch_window_s,
                           "batching steps is the simulator's speed-up"),
                          ("churn.mean_online_s", sc.churn.mean_online_s, "a real peer is off when its process is"),
                          ("devices", sc.devices.opted_in(), "energy over contacts is simulated only")]
        problems += [f"{loaded.source}: {field}: real peers over contacts run without it; {why}; remove it"
                     for field, value, why in simulated_only if value]
    d = sc.devices
    for field, value in (("battery_j", d.battery_j), ("recharge_every_s", d.recharge_every_s)):
        if value is not None:
            problems.append(f"{loaded.source}: devices.{field}: batteries are simulated only (p2pfed run); "
                            "real peers report the energy they would spend, without stopping; remove it")
    if any(e.battery_j is not None for e in d.profiles):
        problems.append(f"{loaded.source}: devices.profiles: battery_j: batteries are simulated only (p2pfed run); "
                        "remove it")
    for field, name in (("algorithm.name", sc.algorithm.name), ("model.name", sc.model.name)):
        if check_imports and is_plugin_name(name):   # each peer is a new process: the code must load there
            try:
                check_importable(name, [loaded.base_dir], what=field)
            except ValueError as exc:
                problems.append(f"{loaded.source}: {exc}")
    return problems


FILE_FIELDS = (("dataset", "path"), ("topology", "file"), ("contacts", "file"))
# Files of sections a resolved scenario holds only when it opts in (``dump`` leaves them out otherwise).
OPTIONAL_FILE_FIELDS = (("devices", "file"),)


def _missing_files(raw: dict[str, Any], source: str, base_dir: Path) -> list[str]:
    """Files a scenario names that do not exist (checked even when other fields are wrong)."""
    problems = []
    for section, key in (*FILE_FIELDS, *OPTIONAL_FILE_FIELDS):
        value = raw.get(section, {}).get(key) if isinstance(raw.get(section), dict) else None
        if isinstance(value, str):
            p = Path(value).expanduser()
            p = p if p.is_absolute() else base_dir / p
            if not p.exists():
                problems.append(f"{source}: {section}.{key}: file not found: {p}")
            elif not p.is_file() and not (section == "dataset" and p.is_dir()):   # a folder of .npz files
                problems.append(f"{source}: {section}.{key}: not a file: {p}")
    return problems


def user_code(loaded: RunSpec) -> dict[str, dict[str, str]]:
    """The files of the user's own code the scenario runs (its method, its model), with hashes."""
    sc = loaded.scenario
    return loaded_code([sc.algorithm.name, sc.model.name])


def fingerprint(loaded: RunSpec) -> str:
    """What a checkpoint must have been written for: the resolved scenario, and the hashes of
    the user's code it runs (a checkpoint of an edited method is refused)."""
    code = user_code(loaded)
    scenario = dump(loaded)
    return json.dumps(scenario if not code else {"scenario": scenario, "user_code": code}, sort_keys=True)


# Fields added after runs were committed, left out of the resolved scenario while at their default,
# so that earlier checkpoints (``fingerprint``) still match it.
ADDED_LATER: dict[tuple[str, str], Any] = {("topology", "framing"): False, ("topology", "slow_start"): False,
                                           ("contacts", "protocol"): "ideal", ("engine", "shards"): 1,
                                           ("engine", "scheduler"): None}


def dump(loaded: RunSpec) -> dict[str, Any]:
    """The fully resolved scenario (defaults filled in), for summary.json and reproducibility."""
    data = copy.deepcopy(loaded.scenario.model_dump())
    if not loaded.scenario.devices.opted_in():   # a scenario without it reads (and resumes) as before
        del data["devices"]
    for (section, key), default in ADDED_LATER.items():
        if data[section][key] == default:
            del data[section][key]
    data["algorithm"] = {"name": loaded.scenario.algorithm.name,
                         **loaded.options.model_dump()}
    return data
