"""Resuming a run whose checkpoint is at its end says so in one line, exits 0 and writes its results."""

import pytest

from p2pfed.cli.main import main
from tests.test_contact_checkpoint import BUSY
from tests.test_device_loop import SCENARIO, SMALL

RUNTIMES = {"rounds": SMALL + ["algorithm.name=gossip-avg"],
            "contacts": BUSY + ["algorithm.name=gossip-avg"]}


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_resuming_a_finished_run_says_so_and_writes_its_results_again(runtime, tmp_path, capsys):
    args = ["run", str(SCENARIO), "--quiet", *sum((["--set", s] for s in RUNTIMES[runtime]), [])]
    out = tmp_path / "run"
    assert main(args + ["--out", str(out), "--checkpoint-every", "2"]) == 0
    finished = {name: (out / name).read_text() for name in ("rounds.csv", "devices.csv")}
    capsys.readouterr()
    # killed between its last checkpoint and its results files
    for name in ("rounds.csv", "devices.csv", "summary.json"):
        (out / name).unlink()
    assert main(args + ["--out", str(out), "--checkpoint-every", "2", "--resume"]) == 0
    err = capsys.readouterr().err
    assert "had already finished" in err and "Traceback" not in err
    assert {name: (out / name).read_text() for name in finished} == finished
    # a finished run, resumed again
    assert main(args + ["--out", str(out), "--resume"]) == 0
    assert "had already finished" in capsys.readouterr().err
