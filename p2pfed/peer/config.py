"""The peer config (``p2pfed peer --config peer.yaml``): who this peer is and whom it talks to.

The learning setup (data, model, training, method, rounds, seed) comes from a scenario file, so
a real peer and the simulator read the same thing; the peer file adds what only a real process
has: its id, its endpoint, its neighbours and their keys, its timeouts and where it writes.
Validated like scenarios: unknown keys are errors, one 'file: field: message' line per problem.
Relative paths are resolved against the peer file's folder.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from p2pfed.peer.keys import KeyFileError, load_pair, load_public
from p2pfed.results.files import output_dir_problem
from p2pfed.scenario.loader import describe_error, field_errors, read_yaml_file
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.spec import resolve_from

_TCP = re.compile(r"tcp://(\[[^\]\s]+\]|[^\s:\[\]]+):(\d+)")
MAX_PORT = 65535


def tcp_endpoint(value: str) -> str:
    """``tcp://host:port`` with a port ZeroMQ can bind (it silently wraps larger numbers)."""
    match = _TCP.fullmatch(value)
    if not match or not 1 <= int(match.group(2)) <= MAX_PORT:
        raise ValueError(f"must be tcp://host:port with a port in 1..{MAX_PORT}")
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


@dataclass(frozen=True)
class PeerTiming:
    """How long a launched or planned peer waits, and paces its rounds (peer file fields)."""

    start_timeout_s: float = 120.0
    round_timeout_s: float = 30.0
    round_period_s: float = 0.0
    speedup: float = 1.0
    shared_grid: bool = False

    def fields(self) -> dict[str, float | bool]:
        return asdict(self)


class Neighbour(_Section):
    id: int = Field(ge=0, description=(
        "The neighbour's device id; with CURVE, its messages must come with this peer's key."))
    endpoint: str = Field(description="`tcp://host:port` where the neighbour listens (port 1..65535).")
    public_key: str | None = Field(default=None, description=(
        "The neighbour's `.key` file (required unless `--insecure`); only these keys are accepted, and each is "
        "checked (40 Z85 characters) when the peer file is loaded."))

    @field_validator("endpoint")
    @classmethod
    def _port_in_range(cls, v: str) -> str:
        return tcp_endpoint(v)


class OwnData(_Section):
    path: str = Field(description=(
        "A `.npz` with `x_train`, `y_train`, `x_test`, `y_test` (read without pickle), or a `.csv` with numeric "
        "feature columns and an integer label last (a header row is skipped; a bad row is reported as `file:line`)."))
    test_fraction: float = Field(default=0.2, gt=0, lt=1, description="CSV only: the stratified held-out share.")


class PeerConfig(_Section):
    id: int = Field(ge=0, description=(
        "This peer's device id: its sender id on the wire, and which device of the scenario's dataset it trains on."))
    run_id: str | None = Field(default=None, description=(
        "The run this peer belongs to (`p2pfed plan` draws one per bundle); written into its `peer.json`, and "
        "`p2pfed merge` refuses results of another run. Null: a peer of no plan."))
    scenario: str | None = Field(default=None, description="The scenario file; null: the embedded quickstart.")
    overrides: list[str] = Field(default_factory=list, description=(
        "`key.sub=value` overrides applied to the scenario, as `--set` does."))
    seed: int | None = Field(default=None, description="Overrides the scenario's seed; null: the scenario's.")
    listen: str = Field(description=(
        "The endpoint this peer binds, `tcp://host:port` (e.g. `tcp://0.0.0.0:5555`; port 1..65535)."))
    neighbours: list[Neighbour] = Field(default_factory=list, description=(
        "The peers it sends to and accepts from (see the entries below)."))
    secret_key: str | None = Field(default=None, description=(
        "This peer's `.key_secret` file from `p2pfed keys` (required unless `--insecure`); read when the peer file is"
        " loaded, its keys must be 40 Z85 characters."))
    public_key: str | None = Field(default=None, description=(
        "This peer's own `.key` file (`p2pfed plan` writes it): the secret key must be its pair, so a peer given "
        "another peer's secret key refuses to start instead of running cut off from its neighbours."))
    data: OwnData | None = Field(default=None, description=(
        "The peer's own data instead of the scenario's device `id` (see below); null: the scenario's."))
    out: str = Field(default="peer-out", description=(
        "Folder for `checkpoint.pt`, `peer.json` and the peer's results files; must be a folder (or creatable) and "
        "writable."))
    start_timeout_s: float = Field(default=120.0, gt=0, description=(
        "Round 0 of a fresh start: how long, in seconds, to wait for the neighbours to come up."))
    round_timeout_s: float = Field(default=30.0, gt=0, description=(
        "Later rounds (and after a restart): how long, in seconds, to wait for a neighbour's artifacts; a neighbour "
        "that misses it is not waited for again until it sends."))
    round_period_s: float = Field(default=0.0, ge=0, description=(
        "Rounds on a wall-clock grid of this period in seconds (0: as fast as the neighbours allow); a round that "
        "overruns leaves the next one less time, as in the simulator."))
    max_bad_messages: int = Field(default=20, ge=1, description=(
        "Bad messages tolerated from one peer; after that it is disconnected and ignored."))
    start_time: float | None = Field(default=None, description=(
        "The unix time elapsed times (`sim_time_s` in `rounds.csv`) count from; null: the peer's first start. Over "
        "contacts: the instant of simulated time 0, the same on every peer (`launch` sets it a few seconds ahead; "
        "`plan --start-at`)."))
    speedup: float = Field(default=1.0, gt=0, description=(
        "Over contacts: simulated seconds per wall-clock second (simulated time t is at `start_time + t / speedup`)."))
    shared_grid: bool = Field(default=False, description=(
        "With `round_period_s` and `start_time`: round r ends at `start_time + (r + 1) × round_period_s` on every "
        "peer, which then fuses what arrived and waits for no neighbour, as the simulator's rounds do; a later "
        "artifact is fused a round later and counted late."))
    clock_offset_s: float = Field(default=0.0, description=(
        "For tests: this peer's clock reads this many seconds ahead of its host's (negative: behind), as a host "
        "with a skewed clock would: its start, rounds, timestamps and clock pings all keep to it. 0 on real "
        "hosts; an emulated LAN's faults file sets it (`clocks`)."))

    @field_validator("listen")
    @classmethod
    def _port_in_range(cls, v: str) -> str:
        return tcp_endpoint(v)

    @field_validator("neighbours")
    @classmethod
    def _distinct(cls, v: list[Neighbour]) -> list[Neighbour]:
        ids = [n.id for n in v]
        if len(set(ids)) != len(ids):
            raise ValueError(f"neighbour ids must be distinct, got {ids}")
        return v

    @model_validator(mode="after")
    def _not_self(self) -> PeerConfig:
        if any(n.id == self.id for n in self.neighbours):
            raise ValueError(f"peer {self.id} lists itself as a neighbour")
        if self.shared_grid and (self.round_period_s <= 0 or self.start_time is None):
            raise ValueError("shared_grid needs round_period_s > 0 and start_time (the grid's origin, the same "
                             "on every peer)")
        return self


@dataclass(frozen=True)
class LoadedPeerConfig:
    config: PeerConfig
    source: str
    base_dir: Path

    @overload
    def resolve(self, path: str) -> Path: ...

    @overload
    def resolve(self, path: None) -> None: ...

    def resolve(self, path: str | None) -> Path | None:
        return None if path is None else resolve_from(self.base_dir, path)


def load_peer_config(path: str | Path, *, insecure: bool = False) -> LoadedPeerConfig:
    """Read and validate a peer file before any work: its keys (required unless insecure) are
    read and checked, and its ``out`` folder must be writable."""
    p = Path(path)
    raw = read_yaml_file(p, "peer config")
    try:
        config = PeerConfig.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError([f"{p}: {describe_error(e)}" for e in field_errors(exc.errors())]) from None
    loaded = LoadedPeerConfig(config, str(p), p.resolve().parent)
    problems = []
    files = [("scenario", config.scenario), ("data.path", config.data.path if config.data else None),
             ("public_key", config.public_key)]
    if not insecure:
        if config.secret_key is None:
            problems.append(f"{p}: secret_key: required (or run with --insecure)")
        files.append(("secret_key", config.secret_key))
        for i, n in enumerate(config.neighbours):
            if n.public_key is None:
                problems.append(f"{p}: neighbours.{i}.public_key: required for peer {n.id} (or --insecure)")
            files.append((f"neighbours.{i}.public_key", n.public_key))
    for field, value in files:
        if value is not None and not loaded.resolve(value).exists():
            problems.append(f"{p}: {field}: file not found: {loaded.resolve(value)}")
        elif field == "secret_key" and value is not None:
            problems += _key_problem(p, field, lambda: load_pair(loaded.resolve(value)))
        elif field.endswith("public_key") and value is not None:
            problems += _key_problem(p, field, lambda: load_public(loaded.resolve(value)))
    if not insecure and not problems:
        problems += _foreign_key_problems(loaded)
    out_problem = output_dir_problem(loaded.resolve(config.out))
    if out_problem:
        problems.append(f"{p}: out: {out_problem}")
    if problems:
        raise ScenarioError(problems)
    return loaded


def _key_problem(source: Path, field: str, load) -> list[str]:
    try:
        load()
    except KeyFileError as exc:
        return [f"{source}: {field}: {exc}"]
    return []


def _foreign_key_problems(loaded: LoadedPeerConfig) -> list[str]:
    """A secret key that is not this peer's: another's own public key, or a neighbour's."""
    cfg, where = loaded.config, loaded.source
    assert cfg.secret_key is not None
    try:
        mine, _ = load_pair(loaded.resolve(cfg.secret_key))
        own = None if cfg.public_key is None else load_public(loaded.resolve(cfg.public_key))
        theirs = {n.id: load_public(loaded.resolve(n.public_key)) for n in cfg.neighbours if n.public_key}
    except KeyFileError as exc:
        return [f"{where}: {exc}"]
    for nid, key in theirs.items():
        if key == mine:
            return [f"{where}: secret_key: {cfg.secret_key} is neighbour {nid}'s key pair, not peer {cfg.id}'s: "
                    "give this peer its own keys (each folder of a plan holds the right one)"]
    if own is not None and own != mine:
        return [f"{where}: secret_key: {cfg.secret_key} does not pair with this peer's public_key "
                f"{cfg.public_key}: another peer's secret key?"]
    return []
