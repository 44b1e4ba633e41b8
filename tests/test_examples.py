"""A method and a model of the user's own, from files outside the package: in the synchronous
simulation, over contacts, as three real peers, in a sweep, reproducibly; what a method that needs
the MLP says of another model; and where the user's code is recorded."""

from __future__ import annotations

import csv
import json
import sys
import types
from pathlib import Path

import pytest

from p2pfed.cli.main import main
from p2pfed.engine.runner import Checkpointing, run_scenario
from p2pfed.scenario.loader import launch_problems, load_scenario
from p2pfed.testing import check_algorithm
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
METHOD = "../examples/loss_weighted_gossip.py:LossWeightedGossip"   # relative to the scenario's folder
MODEL = "../examples/dropout_mlp.py:make_model"
TINY = ["dataset.synthetic.num_devices=3", "dataset.synthetic.samples_per_class=12", "rounds=3"]
CONTACTS = ["contacts.kind=static", "contacts.duration_s=900", "asynchronous.train_period_s=300",
            "asynchronous.train_jitter_s=30", "evaluation.every_s=300"]
USER_MODEL = [f"model.name={MODEL}", "model.options={hidden: 16, dropout: 0.3}"]
LEARNS = ["dataset.synthetic.samples_per_class=24", "training.epochs=3", "training.lr=0.2", "rounds=4"]
# one device at a time on one thread, as each real peer computes
ONE_AT_A_TIME = ["engine.batched_training=false", "engine.torch_threads=1"]


def _sets(items: list[str]) -> list[str]:
    return sum((["--set", s] for s in items), [])


def _f1(folder: Path) -> list[str]:
    return [r["f1_macro_mean"] for r in csv.DictReader((folder / "rounds.csv").open())]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_example_method_keeps_the_contract():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from loss_weighted_gossip import LossWeightedGossip
    finally:
        sys.path.remove(str(ROOT / "examples"))
    check_algorithm(LossWeightedGossip)


def _example_simulated(tmp_path):
    return run_scenario(load_scenario(SCENARIO, [*TINY, f"algorithm.name={METHOD}"]), tmp_path / "sim", progress=False)


def test_the_example_method_runs_synchronously_and_over_contacts(tmp_path):
    """Its mechanism fires (devices weigh their own model below 1 once peers arrive)."""
    sim = _example_simulated(tmp_path)
    assert 0 < sim["algorithm_stats"]["own_weight"] < 1
    assert sim["code"]["user_code"][METHOD]["path"] == str(ROOT / "examples" / "loss_weighted_gossip.py")
    contacts = run_scenario(load_scenario(SCENARIO, [*TINY, f"algorithm.name={METHOD}", *CONTACTS]),
                            tmp_path / "contacts", progress=False)
    assert contacts["comm"]["messages_sent"] > 0 and 0 < contacts["algorithm_stats"]["own_weight"] < 1


@pytest.mark.slow   # three peer processes; in the slow set .ci/run runs
def test_the_example_method_runs_as_three_real_peers_with_the_simulations_numbers(tmp_path):
    sim = _example_simulated(tmp_path)
    code = main(["launch", str(SCENARIO), "--algorithm", METHOD, "--out", str(tmp_path / "peers"),
                 "--round-timeout", "20", *_sets(TINY)])
    assert code == 0, (tmp_path / "peers" / "peers" / "peer-0" / "peer.log").read_text()[-2000:]
    real = json.loads((tmp_path / "peers" / "summary.json").read_text())
    assert real["runtime"]["secure"] is True and real["algorithm"] == "loss-weighted-gossip"
    assert real["code"]["user_code"][METHOD]["path"] == str(ROOT / "examples" / "loss_weighted_gossip.py")
    assert abs(real["final"]["f1_macro_mean"] - sim["final"]["f1_macro_mean"]) <= 0.02
    assert real["comm"]["messages_sent"] == sim["comm"]["messages_sent"]


# gossip-avg's runs are in the slow set that .ci/run also runs
@pytest.mark.parametrize("method", [pytest.param("gossip-avg", marks=pytest.mark.slow), "ditto"])
def test_a_model_of_the_users_own_runs_reproducibly_in_every_simulated_runtime(tmp_path, method):
    """An MLP with dropout: the batched simulation trains it one device at a time (dropout cannot
    run under vmap) instead of crashing; two runs from one seed give the same numbers in each
    runtime, and one device at a time on one thread (as each real peer computes) gives the same."""
    base = [*TINY, *LEARNS, f"algorithm.name={method}", *USER_MODEL]
    for label, extra in (("sync", []), ("contacts", CONTACTS)):
        for i in (1, 2):
            run_scenario(load_scenario(SCENARIO, [*base, *extra]), tmp_path / f"{label}{i}", progress=False)
        assert _f1(tmp_path / f"{label}1") == _f1(tmp_path / f"{label}2"), label
    f1 = [float(v) for v in _f1(tmp_path / "sync1")]
    assert f1[-1] > f1[0] + 0.2, f1                  # it learns
    run_scenario(load_scenario(SCENARIO, [*base, "seed=4"]), tmp_path / "seed4", progress=False)
    assert _f1(tmp_path / "seed4") != _f1(tmp_path / "sync1")   # the dropout draws follow the seed
    run_scenario(load_scenario(SCENARIO, [*base, *ONE_AT_A_TIME]), tmp_path / "alone", progress=False)
    assert _f1(tmp_path / "alone") == _f1(tmp_path / "sync1")   # batching changes nothing for it


@pytest.mark.slow   # three peer processes each; in the slow set .ci/run runs
@pytest.mark.parametrize("method", ["gossip-avg", "ditto"])
def test_a_model_of_the_users_own_gives_the_simulators_numbers_as_three_real_peers(tmp_path, method):
    base = [*TINY, *LEARNS, f"algorithm.name={method}", *USER_MODEL]
    run_scenario(load_scenario(SCENARIO, [*base, *ONE_AT_A_TIME]), tmp_path / "alone", progress=False)
    code = main(["launch", str(SCENARIO), "--out", str(tmp_path / "peers"), "--insecure", "--round-timeout", "20",
                 *_sets(base)])
    assert code == 0, (tmp_path / "peers" / "peers" / "peer-0" / "peer.log").read_text()[-2000:]
    assert _f1(tmp_path / "peers") == _f1(tmp_path / "alone")


@pytest.mark.parametrize("method", ["fedsub", "safl", "fedpews"])
def test_a_method_that_needs_units_refuses_a_model_without_them_in_one_line(method, capsys):
    """They work on the units of an MLP or a CNN (issue 33): a model of the user's own has none."""
    code = main(["validate", str(SCENARIO), *_sets([f"algorithm.name={method}", *USER_MODEL])])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 2 and len(out) == 1, out
    assert out[0] == (f"{SCENARIO}: model.name: {method} works on the units of a model's layers (neurons, "
                      f"channels); use model.name: mlp or cnn (got '{MODEL}')")


def test_a_body_head_method_needs_a_declared_head(tmp_path):
    (tmp_path / "plain.py").write_text(
        "import torch\n"
        "def make_model(input_size, num_classes, generator):\n"
        "    return torch.nn.Sequential(torch.nn.Linear(input_size, 8), torch.nn.ReLU(), "
        "torch.nn.Linear(8, num_classes))\n")
    loaded = load_scenario(SCENARIO, [*TINY, "algorithm.name=fedper", f"model.name={tmp_path / 'plain.py'}:make_model"])
    with pytest.raises(ValueError, match="declares no head: a body/head method needs a submodule named `head`"):
        run_scenario(loaded, None, progress=False)
    ok = load_scenario(SCENARIO, [*TINY, "algorithm.name=fedper", *USER_MODEL])
    assert run_scenario(ok, None, progress=False)["algorithm_stats"]["fusions_changing_head"] == 0


def test_bad_names_of_the_users_code_are_one_line_each(tmp_path, capsys):
    (tmp_path / "broken.py").write_text("raise RuntimeError('half-written')\n")
    cases = {f"algorithm.name={tmp_path}/missing.py:X": "file not found",
             f"algorithm.name={tmp_path}/broken.py:X": "importing broken failed: RuntimeError: half-written",
             f"algorithm.name={ROOT}/examples/dropout_mlp.py:make_model":
                 "is not a subclass of p2pfed.algorithms.Algorithm",
             "algorithm.name=no_such_module:X": "no module 'no_such_module'",
             f"model.name={ROOT}/examples/dropout_mlp.py:nothing": "has no 'nothing'"}
    for override, expected in cases.items():
        assert main(["validate", str(SCENARIO), "--set", "algorithm.name=gossip-avg", "--set", override]) == 2
        out = capsys.readouterr().out.strip().splitlines()
        assert len(out) == 1 and expected in out[0], (override, out)


def test_validate_launch_finds_code_that_only_this_process_can_import():
    """A class that lives only in this process (a notebook's, say) would fail in every peer."""
    module = types.ModuleType("made_here")
    module.Method = type("Method", (__import__("p2pfed.algorithms", fromlist=["Local"]).ALGORITHMS["local"],),
                         {"name": "made-here"})
    sys.modules["made_here"] = module
    try:
        loaded = load_scenario(SCENARIO, [*TINY, "algorithm.name=made_here:Method"])
        problems = launch_problems(loaded)
    finally:
        del sys.modules["made_here"]
    assert len(problems) == 1 and "algorithm.name: 'made_here:Method' does not load in a new process" in problems[0]
    assert launch_problems(load_scenario(SCENARIO, [*TINY, f"algorithm.name={METHOD}"])) == []


def test_a_peer_does_not_check_its_own_import_in_yet_another_process(tmp_path, monkeypatch):
    """The launcher checks once that a new process loads the user's code; each peer is such a
    process and loads it itself. 36 peers each starting a checking process at once on 2 cores
    timed out (120 s) and every peer failed."""
    from p2pfed.peer.config import load_peer_config
    from p2pfed.peer.runtime import Peer
    from p2pfed.scenario import loader
    from tests.peer_support import write_peer_files

    def no_new_process(*args, **kwargs):
        raise AssertionError("a peer started an import check")

    monkeypatch.setattr(loader, "check_importable", no_new_process)
    path = write_peer_files(tmp_path, n=2, secure=False, overrides=[f"algorithm.name={METHOD}"])[0]
    peer = Peer(load_peer_config(path, insecure=True), insecure=True)
    try:
        assert type(peer.loop.algorithm).__name__ == "LossWeightedGossip"
    finally:
        peer.close()
    with pytest.raises(AssertionError, match="import check"):   # the launcher's check still runs
        loader.launch_problems(load_scenario(SCENARIO, [*TINY, f"algorithm.name={METHOD}"]))


def test_a_checkpoint_of_edited_user_code_is_refused(tmp_path):
    method_file = tmp_path / "my_gossip.py"
    method_file.write_text((ROOT / "examples" / "loss_weighted_gossip.py").read_text())
    name = f"{method_file}:LossWeightedGossip"
    ckpt = Checkpointing(tmp_path / "run.ckpt", stop_after_round=1)
    assert run_scenario(load_scenario(SCENARIO, [*TINY, f"algorithm.name={name}"]), None, progress=False,
                        checkpointing=ckpt) is None
    method_file.write_text(method_file.read_text() + "\n# edited\n")
    from p2pfed import plugins
    plugins._loaded.pop(name)           # what a new process finds: the edited file
    sys.modules.pop("my_gossip")
    with pytest.raises(ValueError, match="run.ckpt: written for another scenario"):
        run_scenario(load_scenario(SCENARIO, [*TINY, f"algorithm.name={name}"]), None, progress=False,
                     checkpointing=ckpt)


def test_an_installed_package_registers_a_method_by_entry_point(tmp_path, monkeypatch):
    dist = tmp_path / "my_methods-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-methods\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[p2pfed.algorithms]\nweighted = loss_weighted_gossip:LossWeightedGossip\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    summary = run_scenario(load_scenario(SCENARIO, [*TINY, "algorithm.name=weighted"]), None, progress=False)
    assert summary["algorithm"] == "weighted" and 0 < summary["algorithm_stats"]["own_weight"] < 1


@pytest.mark.slow   # a sweep on a Dask worker; in the slow set .ci/run runs
def test_a_sweep_runs_the_users_method_and_model_shortened_from_the_command_line(tmp_path):
    sweep = tmp_path / "mine.yaml"
    sweep.write_text(f"scenario: {SCENARIO}\n"
                     f"methods: [gossip-avg, {ROOT}/examples/loss_weighted_gossip.py:LossWeightedGossip]\n"
                     f"seeds: [0, 1, 2]\nset: {{model.name: '{ROOT}/examples/dropout_mlp.py:make_model', "
                     "model.options: {hidden: 16}, dataset.synthetic.num_devices: 3, "
                     "dataset.synthetic.samples_per_class: 12}\n")
    code = main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--workers", "1", "--quiet",
                 "--set", "rounds=2", "--seeds", "4"])
    assert code == 0
    cells = sorted(p for p in (tmp_path / "out" / "cells").iterdir() if not p.name.startswith("."))
    assert len(cells) == 2
    for cell in cells:
        summary = json.loads((cell / "summary.json").read_text())
        assert summary["rounds"] == 2 and summary["seed"] == 4
        assert f"{ROOT}/examples/dropout_mlp.py:make_model" in summary["code"]["user_code"]
    # The tables name the user's method as it names itself; its file is in each summary's code.
    for table in ("sweep.csv", "summary.csv"):
        rows = list(csv.DictReader((tmp_path / "out" / table).open()))
        assert sorted({r["method"] for r in rows}) == ["gossip-avg", "loss-weighted-gossip"], table


def test_a_users_method_is_labelled_by_its_name_in_summary_and_compare_tables(tmp_path):
    summary = run_scenario(load_scenario(SCENARIO, [*TINY, f"algorithm.name={METHOD}"]), tmp_path / "run",
                           progress=False)
    assert summary["algorithm"] == "loss-weighted-gossip"
    assert summary["code"]["user_code"][METHOD]["path"] == str(ROOT / "examples" / "loss_weighted_gossip.py")
    method = f"{ROOT}/examples/loss_weighted_gossip.py:LossWeightedGossip"
    assert main(["compare", str(SCENARIO), "--algorithms", f"{method},local", "--out", str(tmp_path / "cmp"),
                 "--quiet", *_sets(TINY)]) == 0
    rows = list(csv.DictReader((tmp_path / "cmp" / "comparison.csv").open()))
    assert [r["algorithm"] for r in rows] == ["loss-weighted-gossip", "local"]


def test_a_sweep_cell_is_keyed_by_the_users_code(tmp_path):
    from p2pfed import plugins
    from p2pfed.sweeps.cells import make_cell

    method_file = tmp_path / "cell_method.py"
    method_file.write_text((ROOT / "examples" / "loss_weighted_gossip.py").read_text())
    name = f"{method_file}:LossWeightedGossip"
    first = make_cell(SCENARIO, name, 0, TINY)
    assert make_cell(SCENARIO, name, 0, TINY).id == first.id
    method_file.write_text(method_file.read_text() + "\n# edited\n")
    plugins._loaded.pop(name)
    sys.modules.pop("cell_method")
    assert make_cell(SCENARIO, name, 0, TINY).id != first.id


def test_the_energy_aware_example_shares_less_when_low_and_its_batteries_last_longer(tmp_path):
    """examples/energy-aware.yaml as shipped against the same run never low (low_j 0, which is
    gossip averaging): the policy fires (steps taken low, of them quiet ones), and the federation
    spends less of its time with devices empty."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from energy_aware_gossip import EnergyAwareGossip
    finally:
        sys.path.remove(str(ROOT / "examples"))
    check_algorithm(EnergyAwareGossip)
    scenario = ROOT / "examples" / "energy-aware.yaml"
    frugal = run_scenario(load_scenario(scenario), tmp_path / "frugal", progress=False)
    always = run_scenario(load_scenario(scenario, ["algorithm.low_j=0"]), tmp_path / "always", progress=False)
    assert always["algorithm_stats"]["low_steps_fraction"] == 0 == always["algorithm_stats"]["quiet_steps_fraction"]
    assert 0 < frugal["algorithm_stats"]["quiet_steps_fraction"] < frugal["algorithm_stats"]["low_steps_fraction"]
    assert frugal["comm"]["messages_sent"] < always["comm"]["messages_sent"]
    empty = [s["energy"]["batteries"]["depleted_fraction"] for s in (frugal, always)]
    assert 0 < empty[0] < empty[1]
