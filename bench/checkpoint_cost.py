"""What a contact run's checkpoint costs: its size, the time to write it and the time to take a run up
from it (issue 31: ``p2pfed run --checkpoint-every N`` over contacts).

Runs SCENARIO (default: the 1,000-device random-waypoint scenario) to its ``--at``-th evaluation
with a checkpoint there, then continues it from that checkpoint to the next evaluation, timing the
checkpoint's write (``save_checkpoint``) and its read and restore (``load_checkpoint`` and the
simulation's ``load_state_dict``), and the stretch of simulation between the two evaluations for
scale. Prints one JSON line; the figures are this machine's on this run:

    python bench/checkpoint_cost.py [SCENARIO] [--at 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from p2pfed.engine import runner
from p2pfed.engine.opportunistic import OpportunisticSimulation
from p2pfed.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", default=str(ROOT / "scenarios" / "synthetic-rwp-1000.yaml"))
    parser.add_argument("--at", type=int, default=2, help="the evaluation the checkpoint is taken at")
    args = parser.parse_args()
    timings: dict[str, float] = {}

    def timed(name: str, fn):
        def wrapper(*a, **k):
            started = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                timings[name] = timings.get(name, 0.0) + time.perf_counter() - started
        return wrapper

    runner.save_checkpoint = timed("write_s", runner.save_checkpoint)
    runner.load_checkpoint = timed("read_s", runner.load_checkpoint)
    OpportunisticSimulation.load_state_dict = timed("restore_s", OpportunisticSimulation.load_state_dict)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "checkpoint.pt"
        started = time.perf_counter()
        first = runner.Checkpointing(path, every=args.at, stop_after_round=args.at)
        assert runner.simulate(load_scenario(args.scenario), progress=False, checkpointing=first) is None
        to_checkpoint = time.perf_counter() - started
        size = path.stat().st_size
        written = timings.pop("write_s")
        started = time.perf_counter()
        more = runner.Checkpointing(path, every=1, stop_after_round=args.at + 1)
        assert runner.simulate(load_scenario(args.scenario), progress=False, checkpointing=more) is None
        resumed = time.perf_counter() - started
    print(json.dumps({"scenario": args.scenario, "evaluation": args.at, "checkpoint_bytes": size,
                      "write_s": round(written, 3), "read_s": round(timings["read_s"], 3),
                      "restore_s": round(timings["restore_s"], 3), "run_to_checkpoint_s": round(to_checkpoint, 1),
                      "resume_and_one_more_evaluation_s": round(resumed, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
