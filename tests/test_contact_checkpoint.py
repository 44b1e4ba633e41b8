"""A contact run stopped at an evaluation and continued from its checkpoint ends bit-identical."""

import signal
import subprocess
import sys
import time

import pytest
import torch

from p2pfed.algorithms import ALGORITHMS
from p2pfed.cli.main import main
from p2pfed.engine.runner import Checkpointing, run_scenario
from p2pfed.scenario.loader import load_scenario
from tests.conftest import ROOT
from tests.test_device_loop import FIRES_EARLY

SCENARIO = ROOT / "scenarios" / "synthetic-small.yaml"
# Six devices meeting in Poisson contacts short and slow enough that transfers are cut and some are
# in flight at the checkpoint, parts carried on (store-carry-forward with a TTL), lost messages,
# devices going off and on: every piece of a contact run's state has to survive.
BUSY = ["dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=16", "model.hidden=[16,32]",
        "contacts.kind=poisson", "contacts.mean_intercontact_s=60", "contacts.mean_duration_s=30",
        "contacts.bandwidth_bps=1e4", "contacts.duration_s=900", "contacts.loss_rate=0.1",
        "asynchronous.train_period_s=60", "asynchronous.train_jitter_s=20", "asynchronous.max_age_s=400",
        "forwarding.enabled=true", "forwarding.hop_limit=3", "churn.mean_online_s=300",
        "churn.mean_offline_s=60", "evaluation.every_s=150"]
# Slow devices on LTE with small batteries recharged on a schedule: steps whose shares leave when
# their work is done, devices that run empty and come back.
ENERGY = ["devices.profiles=[{name: slow, fraction: 1.0, flops_per_s: 5.0e3, joules_per_flop: 2.0e-9}]",
          "devices.radio=lte", "devices.battery_j=3", "devices.recharge_every_s=400"]
VARIANTS = {**{name: (name, FIRES_EARLY.get(name, [])) for name in sorted(ALGORITHMS)},
            "fedsub-batch-window": ("fedsub", ["asynchronous.batch_window_s=30"]),
            "fedsub-batch-window-offload": ("fedsub", ["asynchronous.batch_window_s=30", "engine.offload=true"]),
            "fedsub-acknowledged": ("fedsub", ["contacts.protocol=acknowledged", "contacts.loss_rate=0"]),
            "gossip-avg-energy": ("gossip-avg", ENERGY)}


def _loaded(name: str, extra: list[str] = ()):
    return load_scenario(SCENARIO, BUSY + [f"algorithm.name={name}"] + list(extra))


def _same_files(a, b) -> None:
    for name in ("rounds.csv", "devices.csv"):
        assert (a / name).read_text() == (b / name).read_text(), name


# the offload helper is a process of its own: its variant is in the slow set .ci/run runs
@pytest.mark.parametrize("variant", [pytest.param(v, marks=pytest.mark.slow) if v.endswith("-offload") else v
                                     for v in sorted(VARIANTS)])
def test_a_contact_run_stopped_and_resumed_ends_bit_identical(variant, tmp_path):
    name, extra = VARIANTS[variant]
    whole = run_scenario(_loaded(name, extra), tmp_path / "whole", progress=False)
    ckpt = Checkpointing(tmp_path / "run.ckpt", every=1, stop_after_round=3)
    assert run_scenario(_loaded(name, extra), None, progress=False, checkpointing=ckpt) is None
    saved = torch.load(ckpt.path, weights_only=True)["state"]
    assert saved["evaluated"] == 3 and saved["time"] == 450.0
    resumed = run_scenario(_loaded(name, extra), tmp_path / "resumed", progress=False,
                           checkpointing=Checkpointing(ckpt.path))
    drop = ("wall_time_s", "offload")   # this process's wall time and helper traffic, not the run's
    assert {k: v for k, v in resumed.items() if k not in drop} == {k: v for k, v in whole.items() if k not in drop}
    _same_files(tmp_path / "whole", tmp_path / "resumed")


def test_the_contact_restore_test_crosses_an_evaluation_with_transfers_in_flight_and_parts_carried(tmp_path):
    ckpt = Checkpointing(tmp_path / "run.ckpt", stop_after_round=3)
    run_scenario(_loaded("fedsub"), None, progress=False, checkpointing=ckpt)
    state = torch.load(ckpt.path, weights_only=True)["state"]
    assert any(s["kind"] == "transfer" for s in state["sessions"]), "no transfer in flight at the checkpoint"
    assert any(d["carried"] for d in state["state"]), "nothing carried at the checkpoint"
    assert state["churn"] and state["contact_ends"]
    ckpt.path.unlink()
    run_scenario(_loaded("gossip-avg", ENERGY), None, progress=False, checkpointing=ckpt)
    state = torch.load(ckpt.path, weights_only=True)["state"]
    assert state["offers_later"], "no share waiting for its step's work to finish at the checkpoint"
    assert state["recharge"] and not all(state["energy"]["powered"])
    ckpt.path.unlink()
    run_scenario(_loaded(*VARIANTS["fedsub-acknowledged"]), None, progress=False, checkpointing=ckpt)
    state = torch.load(ckpt.path, weights_only=True)["state"]
    assert any(s["kind"] == "ack" for s in state["sessions"]), "no acknowledgement on its way at the checkpoint"
    assert all("peer_have" in s for s in state["sessions"]) and state["lines"] and state["control"]["control_bytes"]


def test_a_contact_run_checkpoints_and_resumes_from_the_command_line(tmp_path, capsys):
    args = ["run", str(SCENARIO), "--quiet", *sum((["--set", s] for s in BUSY), [])]
    assert main(args + ["--out", str(tmp_path / "whole")]) == 0
    out = tmp_path / "ckpt"
    assert main(args + ["--out", str(out), "--checkpoint-every", "2"]) == 0
    assert (out / "checkpoint.pt").exists()
    _same_files(tmp_path / "whole", out)
    # a run killed after its last checkpoint (at its end) writes its results from it
    (out / "rounds.csv").unlink()
    assert main(args + ["--out", str(out), "--resume"]) == 0
    _same_files(tmp_path / "whole", out)


def test_checkpoints_over_contacts_need_windows_that_close_at_evaluations(tmp_path):
    loaded = _loaded("gossip-avg", ["asynchronous.batch_window_s=35"])
    with pytest.raises(ValueError, match="evaluation.every_s .* multiple of asynchronous.batch_window_s"):
        run_scenario(loaded, None, progress=False, checkpointing=Checkpointing(tmp_path / "c.ckpt"))


@pytest.mark.slow   # a run process killed, and two whole runs; in the slow set .ci/run runs
def test_a_contact_run_killed_mid_way_resumes_from_its_checkpoint_on_the_command_line(tmp_path):
    """SIGKILL ``p2pfed run`` over contacts once its first checkpoint is written; ``--resume``
    finishes it with the files of an uninterrupted run."""
    longer = BUSY + ["contacts.duration_s=3000"]   # 20 evaluations: the kill lands mid-way
    args = ["run", str(SCENARIO), "--quiet", *sum((["--set", s] for s in longer), [])]
    assert main(args + ["--out", str(tmp_path / "whole")]) == 0
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "p2pfed.cli.main", *args, "--out", str(out),
                             "--checkpoint-every", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (out / "checkpoint.pt").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    evaluated = torch.load(out / "checkpoint.pt", weights_only=True)["state"]["evaluated"]
    assert 1 <= evaluated < 20 and not (out / "rounds.csv").exists()
    assert main(args + ["--out", str(out), "--resume"]) == 0
    _same_files(tmp_path / "whole", out)
