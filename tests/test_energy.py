"""Devices as they are (issue 34): a step's simulated time and compute energy follow its work, a
byte costs what its radio's figure says, an empty battery stops its device and the run goes on,
and a scenario without a ``devices`` section never touches any of it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from p2pfed.energy import PROFILES, RADIOS
from p2pfed.energy.work import training_flops
from p2pfed.engine.runner import Checkpointing, run_scenario
from p2pfed.learning.model import build_model
from p2pfed.scenario.loader import load_scenario
from p2pfed.scenario.errors import ScenarioError
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
# Six devices on a complete graph, 48 training samples each, a 16-32 MLP, whole-model gossip
# (the cheapest method that communicates): about a second a run.
SMALL = ["dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=16", "model.hidden=[16,32]",
         "rounds=4", "algorithm.name=gossip-avg", "engine.torch_threads=1"]
CONTACTS = ["contacts.kind=poisson", "contacts.mean_intercontact_s=100", "contacts.mean_duration_s=30",
            "contacts.duration_s=600", "asynchronous.train_period_s=60", "evaluation.every_s=150"]
SLOW = "devices.profiles=[{name: slow, fraction: 1.0, flops_per_s: 1.0e5, joules_per_flop: 2.0e-9}]"


def _untouchable(*_args, **_kw):
    raise AssertionError("the energy model ran for a scenario that did not opt in")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The small scenario without a devices section, run with every entry to the energy model
    made to fail: its results, and the proof that nothing of the model ran."""
    from p2pfed.device import loop
    from p2pfed.device.energy import EnergyMeter

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EnergyMeter, "__init__", _untouchable)
        mp.setattr(loop, "training_flops", _untouchable)
        mp.setattr(loop, "counting_work", _untouchable)
        return _run(tmp_path_factory.mktemp("plain"), "plain", [])


@pytest.fixture(scope="module")
def lte(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("lte"), "lte", ["devices.radio=lte"])


def _run(tmp_path: Path, name: str, overrides: list[str]) -> tuple[dict, list[dict], list[dict]]:
    out = tmp_path / name
    summary = run_scenario(load_scenario(SCENARIO, SMALL + overrides), out, progress=False)
    assert summary is not None
    return summary, _csv(out / "devices.csv"), _csv(out / "rounds.csv")


def _csv(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


# -- opting out -----------------------------------------------------------------------------------
def test_a_scenario_without_devices_never_touches_the_energy_model(plain, tmp_path, monkeypatch):
    from p2pfed.device import loop
    from p2pfed.device.energy import EnergyMeter

    monkeypatch.setattr(EnergyMeter, "__init__", _untouchable)
    monkeypatch.setattr(loop, "training_flops", _untouchable)
    monkeypatch.setattr(loop, "counting_work", _untouchable)
    for summary, devices, rounds in [plain, _run(tmp_path, "contacts", CONTACTS)]:
        assert "energy" not in summary and "devices" not in summary["config"]
        assert "energy_j" not in devices[0] and "energy_j" not in rounds[0]
    with pytest.raises(AssertionError, match="did not opt in"):   # and the trap does catch a run that does
        _run(tmp_path, "radio", ["devices.radio=wifi"])


def test_a_radio_alone_only_observes_every_number_stays_as_it_was(plain, lte):
    (base, base_devices, base_rounds), (radio, radio_devices, radio_rounds) = plain, lte
    assert radio["final"] == base["final"] and radio["comm"] == base["comm"]
    for ours, theirs in [(radio_devices, base_devices), (radio_rounds, base_rounds)]:
        assert [{k: row[k] for k in theirs[0]} for row in ours] == theirs
    assert radio["energy"]["comm_j_total"] > 0 and radio["energy"]["compute_j_total"] == 0


# -- compute from the work -------------------------------------------------------------------------
def test_doubling_a_devices_samples_doubles_its_step_time_and_compute_energy(plain, tmp_path):
    runs = {}
    for per_class in (16, 32):
        overrides = [f"dataset.synthetic.samples_per_class={per_class}", SLOW]
        loaded = load_scenario(SCENARIO, SMALL + overrides)
        samples = [len(d.y_train) for d in loaded.federation.devices]
        runs[per_class] = (samples, *_run(tmp_path, f"n{per_class}", overrides))
    (small, s_sum, s_dev, _), (large, l_sum, l_dev, _) = runs[16], runs[32]
    assert large == [2 * n for n in small]                       # the data doubled, device by device
    macs = 16 * 16 + 16 * 32 + 32 * 4                              # the MLP's multiply-adds per sample
    model = build_model(16, 4, [16, 32], seed=0)
    assert training_flops(model, small[0], 1) == 6 * macs * small[0]
    # each fusion (rounds 1-3) averages the device's model with its 5 neighbours': a multiply-add
    # per value of each of the 6 models, whatever the data
    fusion = 3 * 2 * sum(p.numel() for p in model.parameters()) * 6
    for i, n in enumerate(small):
        steps = 4                                                  # one per round, every device takes part
        assert float(s_dev[i]["fusion_flops"]) == float(l_dev[i]["fusion_flops"]) == fusion
        training = {d: float(dev[i]["compute_s"]) - fusion / 1e5 for d, dev in (("s", s_dev), ("l", l_dev))}
        assert training["s"] == pytest.approx(steps * 6 * macs * n / 1e5, rel=1e-6)
        assert training["l"] == pytest.approx(2 * training["s"], rel=1e-6)
        training_j = {d: float(dev[i]["energy_compute_j"]) - fusion * 2e-9 for d, dev in (("s", s_dev), ("l", l_dev))}
        assert training_j["l"] == pytest.approx(2 * training_j["s"], rel=1e-5)
        assert training_j["s"] == pytest.approx(steps * 6 * macs * n * 2e-9, rel=1e-5)
    # and the runtime waited for it: a share leaves when its step is done, so messages take the
    # step's time longer to arrive (2.58 s more, then 5.16 s more, than the bare links take, and
    # the fusion's 0.11 s in rounds 1-3)
    bare = plain[0]["comm"]["delivery_time_s"]["median"]
    step, fused = 6 * macs * small[0] / 1e5, fusion / 3 / 1e5
    assert s_sum["comm"]["delivery_time_s"]["median"] == pytest.approx(bare + step + fused, rel=0.03)
    assert l_sum["comm"]["delivery_time_s"]["median"] == pytest.approx(bare + 2 * step + fused, rel=0.03)


# -- energy per byte --------------------------------------------------------------------------------
def test_a_byte_over_lte_costs_the_presets_figure(lte):
    """The preset is ARO's LTE model at Huang et al.'s median rates: alpha_up 438.39 mW/Mbps at
    6 Mbit/s up and alpha_down 51.97 mW/Mbps at 13 Mbit/s down, each on top of beta 1.2 W; and
    the run's radio energy is the recorder's bytes times those figures plus the tails and idle."""
    summary, devices, rounds = lte
    lte = RADIOS["lte"]
    assert lte.send_j_per_byte == pytest.approx((0.43839 * 6 + 1.2) * 8 / 6e6)       # 3.83 W at 6 Mbit/s
    assert lte.receive_j_per_byte == pytest.approx((0.05197 * 13 + 1.2) * 8 / 13e6)  # 1.88 W at 13 Mbit/s
    assert lte.tail_w * lte.tail_s == pytest.approx(0.1 * 1.2 + (0.002 * 1.68 + 0.018 * 1.06)
                                                    + 250 * (0.002 * 1.68 + 0.038 * 1.06))   # 11.05 J
    energy = summary["energy"]
    assert energy["radio"]["send_j_per_byte"] == lte.send_j_per_byte
    sent = [int(d["bytes_sent"]) + int(d["bytes_wasted"]) for d in devices]   # the recorder's counts
    received = [int(d["bytes_received"]) for d in devices]
    assert sum(sent) == summary["comm"]["bytes_sent_total"] > 0
    per_byte = sum(sent) * lte.send_j_per_byte + sum(received) * lte.receive_j_per_byte
    n, sim_time = len(devices), summary["sim_time_s"]
    assert energy["idle_j_per_device"] == pytest.approx(lte.idle_w * sim_time, rel=1e-6)
    # one busy spell a round, 10 s apart: each round's tail runs whole (10.12 s cut at the next
    # spell, i.e. a little under 10 s), the last one until the run ends
    assert 0 < energy["tail_j_per_device"] <= lte.tail_w * sim_time
    assert energy["comm_j_total"] == pytest.approx(
        per_byte + n * (energy["tail_j_per_device"] + energy["idle_j_per_device"]), rel=1e-6)
    assert sum(float(d["energy_comm_j"]) for d in devices) == pytest.approx(energy["comm_j_total"], rel=1e-6)
    assert float(rounds[-1]["energy_comm_j"]) == pytest.approx(energy["comm_j_total"], rel=1e-6)
    assert [float(r["energy_comm_j"]) for r in rounds] == sorted(float(r["energy_comm_j"]) for r in rounds)


def test_a_radio_tail_runs_after_each_busy_spell_until_the_next_cuts_it():
    """tail_w for up to tail_s after a spell: cut short by a spell that starts within it, whole
    when the next one is later, and the latest one's part so far (the runtime's clock)."""
    from p2pfed.energy import EnergyPlan, Radio
    from p2pfed.device.energy import EnergyMeter
    from p2pfed.results.recorder import Recorder

    radio = Radio("tailed", 0.0, 0.0, tail_w=1.0, tail_s=2.0)
    meter = EnergyMeter(EnergyPlan(2, None, radio, (None, None)), Recorder(2))
    now = [0.0]
    meter.clock = lambda: now[0]
    for start, end in [(0.0, 1.0), (1.5, 2.0), (1.8, 2.5), (10.0, 11.0)]:
        meter.radio_busy(0, start, end)
    now[0] = 11.5
    assert meter.tail_so_far(0) == pytest.approx(0.5 + 2.0 + 0.5)   # cut at 1.5; whole after 2.5; 0.5 so far
    now[0] = 30.0
    assert meter.comm_j(0) == pytest.approx(0.5 + 2.0 + 2.0) and meter.comm_j(1) == 0.0
    state = meter.state_dict()
    again = EnergyMeter(EnergyPlan(2, None, radio, (None, None)), Recorder(2))
    again.load_state_dict(state)
    again.clock = meter.clock
    assert again.comm_j(0) == meter.comm_j(0)


def test_an_idle_radio_costs_its_power_over_the_time_the_device_is_powered(tmp_path):
    """A radio that only listens (no J per byte): each device's communication energy is idle_w
    times the run's simulated time; the wifi preset's idle power is ns-3's 0.273 A at 3.0 V."""
    assert RADIOS["wifi"].idle_w == pytest.approx(0.273 * 3.0)
    idle = "devices.radio={send_j_per_byte: 0, receive_j_per_byte: 0, idle_w: 0.5}"
    summary, devices, rounds = _run(tmp_path, "idle", [idle])
    sim_time = summary["sim_time_s"]
    for d in devices:
        assert float(d["energy_comm_j"]) == pytest.approx(0.5 * sim_time, rel=1e-6)
    assert summary["energy"]["idle_j_per_device"] == pytest.approx(0.5 * sim_time, rel=1e-6)
    period = sim_time / len(rounds)
    assert [float(r["energy_comm_j"]) for r in rounds] == pytest.approx(
        [6 * 0.5 * period * (k + 1) for k in range(len(rounds))], rel=1e-6)   # it grows with the clock
    # idle listening alone empties a battery: device 0 (2 J at 0.5 W) stops at its first check after 4 s
    summary, devices, _ = _run(tmp_path, "idle-battery", ["rounds=6", idle, _battery_file(tmp_path, 2.0)])
    assert summary["energy"]["batteries"]["devices_depleted"] == 1
    assert 4.0 <= float(devices[0]["depleted_at_s"]) <= 4.0 + period
    assert float(devices[0]["energy_comm_j"]) == pytest.approx(0.5 * float(devices[0]["depleted_at_s"]), rel=1e-6)


# -- batteries ---------------------------------------------------------------------------------------
def _battery_file(tmp_path: Path, capacity_j: float) -> str:
    path = tmp_path / "devices.csv"
    rows = ["device,profile,battery_j"] + [f"{i},phone,{capacity_j if i == 0 else ''}" for i in range(6)]
    path.write_text("\n".join(rows) + "\n")
    return f"devices.file={path}"


def test_an_empty_battery_stops_the_device_and_the_run_goes_on(tmp_path):
    summary, devices, rounds = _run(tmp_path, "battery", ["rounds=6", "devices.radio=lte",
                                                           _battery_file(tmp_path, 0.1)])
    batteries = summary["energy"]["batteries"]
    assert batteries["devices"] == 1 and batteries["devices_depleted"] == 1 and batteries["powered_at_end"] == 5
    dead, alive = devices[0], devices[1:]
    assert dead["depleted_at_s"] != "" and float(dead["battery_left_j"]) == 0.0
    assert 0 < float(dead["depleted_at_s"]) < 60                  # it ran out during the run
    assert int(dead["messages_sent"]) < min(int(d["messages_sent"]) for d in alive)
    # the others trained every round: six steps of work each, more than the stopped device's
    assert {float(d["compute_s"]) for d in alive} == {float(alive[0]["compute_s"])}
    assert float(dead["compute_s"]) < float(alive[0]["compute_s"])
    assert len(rounds) == 6 and float(rounds[-1]["f1_macro_mean"]) > 0
    assert float(dead["energy_j"]) >= 0.1                          # what it used is what it had, and its last message


def test_over_contacts_a_battery_runs_out_and_a_recharge_brings_the_device_back(tmp_path):
    summary, devices, _ = _run(tmp_path, "contacts", CONTACTS + [
        "devices.radio=lte", "devices.recharge_every_s=200", _battery_file(tmp_path, 0.03)])
    batteries = summary["energy"]["batteries"]
    assert batteries["recharges"] == 2 and batteries["depletions"] >= 2
    assert 0 < batteries["depleted_fraction"] < 1 / 6
    assert int(devices[0]["depletions"]) == batteries["depletions"]
    assert all(int(d["messages_sent"]) > 0 for d in devices[1:])


def test_a_method_reads_its_energy_left(tmp_path):
    method = tmp_path / "frugal.py"
    method.write_text(
        "from p2pfed.algorithms.local import Local\n\n"
        "class Frugal(Local):\n"
        "    name = 'frugal'\n\n"
        "    def stats(self):\n"
        "        return {'energy_left_j': self.ctx.energy_left()}\n")
    summary, devices, _ = _run(tmp_path, "frugal", [f"algorithm.name={method}:Frugal", SLOW, "rounds=2",
                                                     "devices.battery_j=50"])
    used = sum(float(d["energy_j"]) for d in devices) / len(devices)
    assert summary["algorithm_stats"]["energy_left_j"] == pytest.approx(50 - used, abs=1e-4)


# -- checkpoints and the schema ------------------------------------------------------------------------
def test_energy_and_batteries_survive_a_checkpoint_bit_identical(tmp_path):
    # One device with a battery (0.05 J: empty after its first round's messages), recharged at 15 s
    # and 30 s, links slow enough that messages are in flight at the checkpoint. (Not every device:
    # with all of them stopped in round 1, round 2's fusion averages only artifacts held across the
    # checkpoint, restored as aligned copies where the whole run averaged the codec's unaligned
    # views, and there the float rounding differs in the 8th digit; aligning the whole run's
    # copies makes the two equal, so it is the fusion's, not the energy model's.)
    overrides = SMALL + ["devices.radio=lte", "devices.recharge_every_s=15", "topology.bandwidth_bps=2.5e3",
                         _battery_file(tmp_path, 0.05)]
    whole = run_scenario(load_scenario(SCENARIO, overrides), tmp_path / "whole", progress=False)
    ckpt = Checkpointing(tmp_path / "run.ckpt", every=1, stop_after_round=2)
    assert run_scenario(load_scenario(SCENARIO, overrides), None, progress=False, checkpointing=ckpt) is None
    assert "energy" in torch.load(ckpt.path, weights_only=True)["state"]
    resumed = run_scenario(load_scenario(SCENARIO, overrides), tmp_path / "resumed", progress=False,
                           checkpointing=Checkpointing(ckpt.path))
    assert whole["energy"]["batteries"]["depletions"] >= 1 and whole["energy"]["batteries"]["recharges"] >= 1
    assert {k: v for k, v in resumed.items() if k != "wall_time_s"} == {k: v for k, v in whole.items()
                                                                       if k != "wall_time_s"}
    for name in ("rounds.csv", "devices.csv"):
        assert (tmp_path / "resumed" / name).read_text() == (tmp_path / "whole" / name).read_text()


@pytest.mark.parametrize("overrides, message", [
    (["devices.profiles=[{name: watch, fraction: 0.5}]"], "fractions must sum to 1"),
    (["devices.profiles=[{name: toaster, fraction: 1.0}]"], "not a named class"),
    (["devices.profiles=[{name: phone-2019, fraction: 1.0}]"], "'phone-2019' had illustrative figures.*use 'phone'"),
    (["devices.recharge_every_s=10"], "no device has a battery"),
    (["devices.radio=carrier-pigeon"], "devices.radio"),
    (["devices.radio={send_j_per_byte: 0, receive_j_per_byte: 0, tail_w: 1}"], "needs both tail_w"),
    (["devices.radio={send_j_per_byte: 0, receive_j_per_byte: 0, tail_j: 1}"], "devices.radio.tail_j: unknown"),
])
def test_bad_devices_sections_name_the_field(overrides, message):
    with pytest.raises(ScenarioError, match=message):
        load_scenario(SCENARIO, overrides)


def test_named_classes_carry_the_measured_figures_they_cite():
    """Each class is a row of the cited HPL table: its rate, and joules per FLOP that give back the
    table's watts and Gflops/W; the role names are their devices' figures."""
    from p2pfed.energy.profiles import MEASURED, ROLES

    table = {"pi-zero-2w": (0.370, 2.1, 0.18), "pi-4": (11.889, 7.2, 1.65), "pi-5": (35.169, 12.7, 2.77),
             "qcs6490": (48.408, 10.1, 4.79), "a18-pro": (57.012, 10.6, 5.38),
             "ryzen-ai-340": (88.787, 41.6, 2.13)}
    assert {m.name for m in MEASURED} == set(table)
    for name, (gflops, watts, gflops_per_w) in table.items():
        profile = PROFILES[name]
        assert profile.flops_per_s == pytest.approx(gflops * 1e9)
        assert profile.flops_per_s * profile.joules_per_flop == pytest.approx(watts)
        assert 1e-9 / profile.joules_per_flop == pytest.approx(gflops_per_w, abs=0.005)
    for role, device in ROLES.items():
        assert (PROFILES[role].flops_per_s, PROFILES[role].joules_per_flop) == (
            PROFILES[device].flops_per_s, PROFILES[device].joules_per_flop)


def test_profiles_are_drawn_by_fraction_from_the_seed():
    assert set(PROFILES) >= {"watch", "phone", "laptop"}
    overrides = ["devices.profiles=[{name: watch, fraction: 0.25}, {name: laptop, fraction: 0.75}]"]
    plan = load_scenario(SCENARIO, overrides).energy_plan   # over the scenario's 12 devices
    assert plan is not None and plan.profiles is not None
    assert [p.name for p in plan.profiles].count("watch") == 3
    assert load_scenario(SCENARIO, overrides).energy_plan == plan          # same seed, same draw


def test_training_a_method_does_inside_train_counts_too(tmp_path):
    """Ditto trains its personal model inside ``train`` and returns the shared model's job: twice
    the work of a plain step (48 samples, one epoch, the 16-32 MLP), each step twice as long."""
    ditto = _run(tmp_path, "ditto", [SLOW, "rounds=2", "algorithm.name=ditto"])[1]
    plain_step = 6 * (16 * 16 + 16 * 32 + 32 * 4) * 48 / 1e5
    training = [float(d["compute_s"]) - float(d["fusion_flops"]) / 1e5 for d in ditto]
    assert training == pytest.approx([2 * 2 * plain_step] * 6, rel=1e-6)


def test_compare_shows_joules_per_device_only_for_runs_that_model_them(plain, lte):
    from p2pfed.results.compare import comparison_columns, comparison_row

    assert "j_per_device" not in comparison_columns([comparison_row(plain[0])])
    row = comparison_row(lte[0])
    assert row["j_per_device"] == lte[0]["energy"]["total_j_per_device"] > 0
    assert {"j_per_device", "comm_j_per_device", "compute_j_per_device"} <= set(comparison_columns([row]))


def test_real_peers_refuse_batteries_naming_the_field():
    from p2pfed.scenario.loader import launch_problems

    assert not launch_problems(load_scenario(SCENARIO, ["devices.radio=ble"]), check_imports=False)
    problems = launch_problems(load_scenario(SCENARIO, ["devices.radio=ble", "devices.battery_j=5"]),
                               check_imports=False)
    assert len(problems) == 1 and "devices.battery_j: batteries are simulated only" in problems[0]


@pytest.mark.slow   # three real peers (~20 s); in the slow set .ci/run runs
def test_real_peers_report_the_energy_the_simulator_counts_for_the_same_work(tmp_path, capsys):
    """Three peers on loopback with a devices section: the same training and fusion FLOPs as the
    simulated run of the same scenario (the same artifacts are fused), priced by each device's
    profile, and radio energy from each peer's own bytes, merged into one summary."""
    from p2pfed.cli.main import main
    from tests.peer_support import TINY

    sets = TINY + [SLOW, "devices.radio={send_j_per_byte: 1.0e-6, receive_j_per_byte: 5.0e-7}"]
    out = tmp_path / "launch"
    code = main(["launch", str(SCENARIO), "--peers", "3", "--out", str(out), "--insecure",
                 "--round-timeout", "20", *sum((["--set", s] for s in sets), [])])
    assert code == 0, capsys.readouterr().err
    real = json.loads((out / "summary.json").read_text())
    sim = run_scenario(load_scenario(SCENARIO, sets), tmp_path / "sim", progress=False)
    assert real["energy"]["flops_total"] == sim["energy"]["flops_total"] > 0
    assert real["energy"]["fusion_flops_total"] == sim["energy"]["fusion_flops_total"] > 0
    assert real["energy"]["compute_j_total"] == pytest.approx(sim["energy"]["compute_j_total"], rel=1e-9)
    devices = _csv(out / "devices.csv")
    for d in devices:
        sent, received = int(d["bytes_sent"]) + int(d["bytes_wasted"]), int(d["bytes_received"])
        assert float(d["energy_comm_j"]) == pytest.approx(sent * 1e-6 + received * 5e-7, rel=1e-6)
    rounds = _csv(out / "rounds.csv")
    assert float(rounds[-1]["energy_j"]) == pytest.approx(real["energy"]["total_j"], rel=1e-6)
    # a neighbour's last message may reach a peer after its last round's snapshot: the last row is
    # still the whole run's account
    from p2pfed.peer.results import write_results
    reports = [json.loads((out / "peers" / f"peer-{i}" / "peer.json").read_text()) for i in range(3)]
    last = reports[0]["energy"]["snapshots"][str(len(rounds) - 1)]
    last[1] -= 1e-3
    again = write_results(tmp_path / "again", load_scenario(SCENARIO, sets), reports, wall_time_s=1.0,
                          full_model_bytes=reports[0]["full_model_bytes"])
    rounds = _csv(tmp_path / "again" / "rounds.csv")
    assert float(rounds[-1]["energy_j"]) == pytest.approx(again["energy"]["total_j"], rel=1e-6)


def test_a_sweep_cell_of_a_scenario_without_devices_keeps_its_id_and_one_with_a_file_hashes_it(tmp_path):
    """The cell id hashes the scenario's canonical form and its files: without a devices section
    the section is absent from that form (cells from before it existed resume); a devices file is
    hashed."""
    from p2pfed.scenario.canonical import canonical
    from p2pfed.scenario.loader import dump
    from p2pfed.sweeps.cells import cell_id

    loaded = load_scenario(SCENARIO)
    assert "devices" not in canonical(dump(loaded), loaded.method)
    assert "devices" in canonical(dump(load_scenario(SCENARIO, [_battery_file(tmp_path, 1.0)])), loaded.method)
    file_option = _battery_file(tmp_path, 1.0)
    before = cell_id(load_scenario(SCENARIO, [file_option]))
    (tmp_path / "devices.csv").write_text((tmp_path / "devices.csv").read_text().replace("1.0", "2.0"))
    assert cell_id(load_scenario(SCENARIO, [file_option])) != before


def test_sweep_tables_show_joules_only_when_the_cells_model_energy():
    """sweep.csv and summary.csv gain joules per device (total, radio, compute) from cells with an
    energy account; a sweep without one keeps its columns."""
    from types import SimpleNamespace

    from p2pfed.sweeps.aggregate import (CellResult, models_energy, summary_columns, summary_rows, sweep_columns,
                                         sweep_rows)
    point = SimpleNamespace(method="fedsub", seed=1, values=(), cell=SimpleNamespace(folder="c1"))
    energy = {"total_j_per_device": 0.5, "comm_j_per_device": 0.4, "compute_j_per_device": 0.1}
    with_energy = [CellResult(point, "done", summary={"final": {"f1_macro_mean": 0.8}, "energy": energy})]
    without = [CellResult(point, "done", summary={"final": {"f1_macro_mean": 0.8}})]
    assert models_energy(with_energy) and not models_energy(without)
    assert "joules_per_device" not in sweep_columns([], models_energy(without))
    row = sweep_rows(with_energy)[0]
    columns = ("joules_per_device", "comm_joules_per_device", "compute_joules_per_device")
    assert tuple(row[c] for c in columns) == (0.5, 0.4, 0.1)
    assert "joules_per_device_mean" in summary_columns([], True)
    assert summary_rows(with_energy, [])[0]["joules_per_device_mean"] == 0.5


def test_fedsubs_k_sweeps_count_as_its_fusion_work(tmp_path):
    """FedSub's fusion work includes its K sweeps (``Clustering.flops``): more than the weighted
    sums alone could ever be (every member's whole model at every fusion), and a sweep's count
    grows with the prototypes it clusters."""
    from p2pfed.algorithms.fedsub.clustering import choose_k_by_dbi_many

    summary, devices, _ = _run(tmp_path, "fedsub", [SLOW, "rounds=3", "algorithm.name=fedsub"])
    assert summary["algorithm_stats"]["k_mean"] >= 1   # it clustered
    params = sum(p.numel() for p in build_model(16, 4, [16, 32], seed=0).parameters())
    sums_at_most = 3 * 2 * params * 6
    assert all(float(d["fusion_flops"]) > sums_at_most for d in devices)
    rng = np.random.default_rng(0)
    small, large = (choose_k_by_dbi_many([rng.normal(size=(n, 8))], k_max=4)[0] for n in (6, 12))
    assert 0 < small.flops < large.flops
    assert small.flops >= 2 * 6 * 8 * 4 * sum(k * (2 + 1 + 1) for k in range(2, 5))   # >= 1 iteration per K


def test_work_a_method_counts_itself_is_charged_as_fusion_work(tmp_path):
    """SAFL aggregates inside ``fuse`` and forms its cluster models inside ``train`` (no fusion
    job): it counts that work with ``ctx.count_work``, and the runtime charges it."""
    summary, devices, _ = _run(tmp_path, "safl", [SLOW, "rounds=5", "algorithm.name=safl"])
    assert summary["energy"]["fusion_flops_total"] > 0
    assert all(float(d["fusion_flops"]) > 0 for d in devices)
    assert summary["energy"]["flops_total"] > summary["energy"]["fusion_flops_total"]


def test_fedalis_k_means_tells_its_work():
    """FedAli's k-means over the members' prototypes reports its distance computations: at
    least one Lloyd iteration and the final assignment (2 FLOPs a multiply-add)."""
    from p2pfed.algorithms.fedali.alignment import kmeans_prototypes

    told: list[float] = []
    sets = [torch.randn(4, 8, generator=torch.Generator().manual_seed(s)) for s in range(3)]
    kmeans_prototypes(sets, [1.0, 1.0, 1.0], count_work=told.append)
    assert len(told) == 1 and told[0] >= 2 * 12 * 4 * 8 * 2
