"""Attacks of the user's own: a class in a file next to the scenario (or an installed entry point)
runs in the synchronous and the contact runtimes as the shipped kinds do, keeps the attacks'
contract, and a bad name or a broken attack is one line naming what is wrong."""

from __future__ import annotations

import importlib.metadata
import json
import textwrap
from pathlib import Path

import pytest

from p2pfed.algorithms import Attacker, Payload
from p2pfed.engine.runner import run_scenario
from p2pfed.plugins import load_object
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.loader import load_scenario
from p2pfed.testing import ContractError, check_attack
from tests.conftest import ROOT

SMALL = ["algorithm.name=gossip-avg", "dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=16",
         "model.hidden=[16]", "rounds=8"]
ATTACK = textwrap.dedent('''
    import numpy as np

    from p2pfed.algorithms import Attacker, Payload


    class Mirror(Attacker):
        """Every float array it shares mirrored through zero, times ``factor``, plus noise."""

        name = "mirror"

        def share(self, device, round, parts):
            factor, std = float(self.options.get("factor", 3.0)), float(self.options.get("std", 0.01))
            return [Payload(dict(p.meta), {k: (-factor * a + self.rng.normal(0, std, a.shape)).astype(a.dtype)
                                           if a.dtype.kind == "f" else a for k, a in p.tensors.items()})
                    for p in parts]


    class Unseeded(Mirror):
        """Draws from numpy's global generator: not the same numbers from the same seed."""

        def share(self, device, round, parts):
            return [Payload(dict(p.meta), {k: a + np.random.normal(0, 1, a.shape).astype(a.dtype)
                                           if a.dtype.kind == "f" else a for k, a in p.tensors.items()})
                    for p in parts]


    class Reshaping(Mirror):
        """Sends its arrays flattened: honest receivers refuse them."""

        def share(self, device, round, parts):
            return [Payload(dict(p.meta), {k: a.reshape(-1) for k, a in p.tensors.items()}) for p in parts]
''')


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scenario in its own folder, next to the attack's file it names by a relative path (one
    folder for the whole module: a module name is imported from one file per process)."""
    folder = tmp_path_factory.mktemp("user-attack")
    (folder / "my_attack.py").write_text(ATTACK)
    path = folder / "attacked.yaml"
    path.write_text((ROOT / "scenarios" / "synthetic-small.yaml").read_text())
    return path


def _honest_f1(scenario: Path, adversaries: str, *more: str) -> float:
    summary = run_scenario(load_scenario(scenario, [*SMALL, *more, f"adversaries={adversaries}"]), progress=False)
    assert summary is not None
    if adversaries == "[]":
        return summary["final"]["f1_macro_mean"]
    assert summary["comm"]["drop_reasons"] == {}, summary["comm"]["drop_reasons"]   # it speaks the protocol
    assert set(summary["adversaries"]["devices"].values()) == {"mirror"}
    return summary["adversaries"]["honest_f1_mean"]


@pytest.mark.parametrize("runtime", [[], ["contacts.kind=poisson", "contacts.duration_s=2400",
                                          "contacts.mean_intercontact_s=120", "contacts.mean_duration_s=60",
                                          "asynchronous.train_period_s=200", "evaluation.every_s=600"]],
                         ids=["rounds", "contacts"])
def test_an_attack_from_a_file_next_to_the_scenario_runs_and_does_what_it_says(scenario, runtime):
    clean = _honest_f1(scenario, "[]", *runtime)
    attacked = _honest_f1(scenario, "[{kind: my_attack.py:Mirror, devices: [0, 1], options: {factor: 3}}]", *runtime)
    assert attacked < clean - 0.15


def test_a_users_attack_keeps_the_contract_and_a_broken_one_is_named_by_check(scenario):
    module = scenario.parent / "my_attack.py"
    check_attack(load_object(f"{module}:Mirror", what="test"), {"factor": 3})
    with pytest.raises(ContractError, match="same_seed_same_numbers"):
        check_attack(load_object(f"{module}:Unseeded", what="test"))
    with pytest.raises(ContractError, match=r"messages_pass_honest_checks: honest devices refused messages"):
        check_attack(load_object(f"{module}:Reshaping", what="test"))


class SetOrderedMirror(Attacker):
    """Sends, mirrored through zero, the share of the neighbour first in a set of their names: the
    same neighbour in one process, another in a process with another hash seed."""

    name = "set-ordered"

    def share(self, device, round, parts):
        by_name = {f"peer-{r.sender}": r for r in device.cache.values()}
        if not by_name:
            return parts
        theirs = by_name[next(iter(set(by_name)))].payload.tensors
        return [Payload(dict(p.meta), {k: (-theirs[k]).astype(a.dtype) if a.dtype.kind == "f" else a
                                       for k, a in p.tensors.items()}) for p in parts]


def test_an_attack_choosing_in_set_order_fails_the_contract_across_hash_seeds_with_the_likely_causes():
    with pytest.raises(ContractError, match="same_seed_same_numbers") as err:
        check_attack(SetOrderedMirror)
    message = str(err.value)
    assert "PYTHONHASHSEED" in message and "iterating a set" in message and "self.rng" in message
    assert "in one process" not in message   # the same within one process: only two processes tell


@pytest.mark.parametrize("kind", ["sign-flip", "noise", "free-ride"])
def test_the_shipped_attacks_keep_the_contract(kind):
    check_attack(kind)


def test_a_bad_attack_name_is_one_line_naming_the_entry(scenario):
    for kind, message in [("missing.py:Mirror", r"adversaries\.0\.kind: .*missing\.py"),
                          ("my_attack.py:Nothing", r"adversaries\.0\.kind: .*has no 'Nothing'"),
                          ("my_attack.py:np", r"adversaries\.0\.kind: .*not a subclass of p2pfed.algorithms.Attacker"),
                          ("sign-flp", r"adversaries\.0\.kind: unknown attack 'sign-flp'.*shipped: label-flip")]:
        with pytest.raises(ScenarioError, match=message):
            load_scenario(scenario, [*SMALL, f"adversaries=[{{kind: {kind}, devices: [0]}}]"])
    with pytest.raises(ScenarioError, match="options are for an attack of your own"):
        load_scenario(scenario, [*SMALL, "adversaries=[{kind: noise, devices: [0], options: {a: 1}}]"])


def test_an_installed_packages_attack_is_found_by_its_entry_point(scenario, monkeypatch):
    monkeypatch.syspath_prepend(str(scenario.parent))
    point = importlib.metadata.EntryPoint(name="mirror", value="my_attack:Mirror", group="p2pfed.attacks")
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: [point] if kw.get("group") == "p2pfed.attacks" else real(**kw))
    loaded = load_scenario(scenario, [*SMALL, "adversaries=[{kind: mirror, devices: [0]}]"])
    assert issubclass(loaded.attacks["mirror"], Attacker) and loaded.attacks["mirror"].name == "mirror"


@pytest.mark.slow   # in the slow set .ci/run also runs: three peer processes
def test_real_peers_run_an_attack_from_a_file_as_the_simulator_does(scenario, tmp_path, capsys):
    from p2pfed.cli.main import main
    sets = ["dataset.synthetic.num_devices=3", "dataset.synthetic.samples_per_class=12", "model.hidden=[8,16]",
            "rounds=3", "algorithm.name=gossip-avg",
            "adversaries=[{kind: my_attack.py:Mirror, devices: [1], options: {factor: 2}}]"]
    code = main(["launch", str(scenario), "--out", str(tmp_path / "launch"), "--round-timeout", "20",
                 *sum((["--set", s] for s in sets), [])])
    assert code == 0, capsys.readouterr().err
    real = json.loads((tmp_path / "launch" / "summary.json").read_text())
    sim = run_scenario(load_scenario(scenario, sets), progress=False)
    assert sim is not None and real["comm"]["drop_reasons"] == {}
    assert real["adversaries"]["devices"] == sim["adversaries"]["devices"] == {"1": "mirror"}
    assert abs(real["adversaries"]["honest_f1_mean"] - sim["adversaries"]["honest_f1_mean"]) <= 0.02
