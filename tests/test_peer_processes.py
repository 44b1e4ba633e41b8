"""Real peer processes on loopback: launch vs simulation, and a killed peer that resumes."""

from __future__ import annotations

import csv
import json
import signal
import time
from pathlib import Path

import pytest
import torch

from p2pfed.algorithms import ALGORITHMS
from p2pfed.cli.main import main
from p2pfed.engine.runner import run_scenario
from p2pfed.peer.launcher import spawn, wait_all
from p2pfed.peer.results import write_results
from p2pfed.scenario.loader import load_scenario
from tests.peer_support import SCENARIO, TINY, write_peer_files


def test_launch_gives_the_simulations_numbers(tmp_path, capsys):
    out = tmp_path / "launch"
    code = main(["launch", str(SCENARIO), "--peers", "3", "--out", str(out), "--insecure",
                 "--round-timeout", "20", *sum((["--set", s] for s in TINY), [])])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "WITHOUT encryption or authentication (--insecure)" in err
    real = json.loads((out / "summary.json").read_text())
    # peers without CURVE keys sign nothing: the simulation of the same unauthenticated network
    sim = run_scenario(load_scenario(SCENARIO, [*TINY, "security.sign_artifacts=false"]), tmp_path / "sim",
                       progress=False)
    assert real["runtime"]["kind"] == "launch" and real["runtime"]["secure"] is False
    assert real["devices"] == sim["devices"] == 3
    assert abs(real["final"]["f1_macro_mean"] - sim["final"]["f1_macro_mean"]) <= 0.02
    assert real["comm"]["messages_sent"] == sim["comm"]["messages_sent"] == 3 * 2 * 3
    assert real["comm"]["messages_dropped"] == 0
    # every message's delivery time, stamped by its sender and measured by its receiver, in both
    delays = real["comm"]["delivery_time_s"]
    assert delays["count"] == sim["comm"]["delivery_time_s"]["count"] == 3 * 2 * 3
    assert delays["negative"] == 0 and 0 < delays["median"] <= delays["p95"] <= delays["max"] < 20
    # Same artifacts; only the sent_at stamps in the JSON headers differ in length.
    assert real["comm"]["bytes_sent_total"] == pytest.approx(sim["comm"]["bytes_sent_total"], rel=0.01)
    rows = list(csv.DictReader((out / "rounds.csv").open()))
    assert [int(r["round"]) for r in rows] == [1, 2, 3]
    assert list(rows[0]) == list(next(csv.DictReader((tmp_path / "sim" / "rounds.csv").open())))
    assert len(list(csv.DictReader((out / "devices.csv").open()))) == 3
    assert (out / "plot.png").stat().st_size > 1000
    # Each peer reports its own class counts: the merged account equals the simulator's.
    real_data = json.loads((out / "dataset.json").read_text())["class_counts"]
    assert real_data == json.loads((tmp_path / "sim" / "dataset.json").read_text())["class_counts"]


def sim_devices(folder: Path) -> list[dict[str, int]]:
    """devices.csv's counters of a results folder, as numbers."""
    return [{k: int(v) for k, v in row.items() if k.startswith("messages_")}
            for row in csv.DictReader((folder / "devices.csv").open())]


def _next_round(checkpoint: Path) -> int:
    try:
        return int(torch.load(checkpoint, weights_only=True)["state"]["next_round"])
    except (FileNotFoundError, RuntimeError, EOFError):
        return -1


# Every method's kill and resume spawns three torch processes twice over: in the slow set .ci/run
# runs (the default suite keeps launch's peers giving the simulation's numbers).
KILLED_PEER_METHODS = [pytest.param(m, marks=pytest.mark.slow) for m in sorted(ALGORITHMS)]

# A real peer stamps ``sent_at`` in epoch seconds, the simulator in simulated seconds: the JSON
# header of each message can differ by a few bytes, which is all of a 1 % margin for methods
# whose messages are a few hundred bytes (prototypes).
STAMP_BYTES_PER_MESSAGE = 24


@pytest.mark.parametrize("method", KILLED_PEER_METHODS)
def test_a_killed_peer_resumes_from_its_checkpoint_and_gives_the_simulations_numbers(tmp_path, method):
    """SIGKILL one peer mid-run and start it again: it resumes from its checkpoint (the method's
    whole state), asks its neighbours for what they sent it after that checkpoint, and the run
    finishes with the numbers of an uninterrupted simulation."""
    rounds = 8
    overrides = [f"rounds={rounds}", f"algorithm.name={method}"]
    # The others wait for the victim (a generous round timeout): nobody fuses without it, so the
    # run must equal the simulation if, and only if, the resumed peer continues exactly.
    configs = write_peer_files(tmp_path, overrides=overrides, round_period_s=0.4,
                               round_timeout_s=60.0, start_timeout_s=60.0)
    procs = [spawn(c, insecure=False) for c in configs]
    victim = tmp_path / "peer-1" / "checkpoint.pt"
    try:
        deadline = time.monotonic() + 120
        while _next_round(victim) < 2:
            assert procs[1].poll() is None and time.monotonic() < deadline, "peer 1 never reached round 2"
            time.sleep(0.05)
        procs[1].send_signal(signal.SIGKILL)
        assert procs[1].wait(10) == -signal.SIGKILL
        killed_at = _next_round(victim)
        assert 2 <= killed_at < rounds
        procs[1] = spawn(configs[1], insecure=False)
        codes = wait_all(procs, 240)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes == [0, 0, 0], [(tmp_path / f"peer-{i}.log").read_text()[-2000:] for i in range(3)]
    reports = [json.loads((tmp_path / f"peer-{i}" / "peer.json").read_text()) for i in range(3)]
    assert reports[1]["resumed_from"] == [killed_at]
    assert "resumes from its checkpoint at round" in (tmp_path / "peer-1.log").read_text()
    # It asked both neighbours to send again; a neighbour answers at most once (one that no
    # longer waits for it, e.g. under ``local``, may have finished before the request came).
    assert reports[1]["recovery"]["requests_sent"] == 2
    assert all(reports[i]["recovery"]["requests_answered"] <= 1 for i in (0, 2))
    for r in reports:
        assert r["rounds_done"] == rounds
        assert sorted(int(k) + 1 for k in r["recorder"]["evaluations"]) == list(range(1, rounds + 1))
    loaded = load_scenario(SCENARIO, TINY + overrides)
    real = write_results(tmp_path / "merged", loaded, reports, wall_time_s=0.0,
                         full_model_bytes=reports[0]["full_model_bytes"])
    sim = run_scenario(loaded, tmp_path / "sim", progress=False)
    assert real["rounds"] == rounds
    assert len(list(csv.DictReader((tmp_path / "merged" / "rounds.csv").open()))) == rounds
    assert abs(real["final"]["f1_macro_mean"] - sim["final"]["f1_macro_mean"]) <= 0.02
    assert real["comm"]["messages_sent"] == sim["comm"]["messages_sent"]
    margin = max(0.01 * sim["comm"]["bytes_sent_total"], STAMP_BYTES_PER_MESSAGE * sim["comm"]["messages_sent"])
    assert abs(real["comm"]["bytes_sent_total"] - sim["comm"]["bytes_sent_total"]) <= margin
    assert real["algorithm_stats"].keys() == sim["algorithm_stats"].keys()
    # Counts that mean what they say: the restart's second copies are no drops, and the restarted
    # peer received what an uninterrupted one does (its last round's frames, held while it was
    # a round behind, included).
    assert real["comm"]["messages_dropped"] == 0
    assert real["comm"]["delivery_ratio"] == (1.0 if real["comm"]["messages_sent"] else 0.0)   # local sends none
    assert [r["recorder"]["counters"][0]["messages_received"] for r in reports] == \
        [c["messages_received"] for c in sim_devices(tmp_path / "sim")]
