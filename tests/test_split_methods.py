"""LG-FedAvg and FedBN in real short runs on the digits CNN: after each fusion the part a method
keeps on the device differs between devices while the part it averages is pulled together, and
``summary.json`` ``algorithm_stats`` counts the fusions that changed each part."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from p2pfed.algorithms.averaging.fedbn import batch_norm_names
from p2pfed.engine.runner import run_scenario
from p2pfed.engine.simulation import RoundSchedule, Simulation
from p2pfed.learning.batched_fusion import FusionJob
from p2pfed.network.topology import build_topology
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import build_algorithms
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.loader import load_scenario

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "digits-cnn.yaml"
DEVICES, ROUNDS = 5, 3
SMALL = [f"rounds={ROUNDS}", f"dataset.partition.num_devices={DEVICES}", "topology.kind=complete",
         f"evaluation.every={ROUNDS}", "model.options.channels=[4, 8]", "engine.torch_threads=1"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _after_fusions(method: str, *extra: str, at: int = ROUNDS - 1) -> tuple[list, list[dict[str, torch.Tensor]]]:
    """Each device's model state (parameters and batch-norm statistics) right after its fusion in
    round ``at`` (the last by default)."""
    loaded = load_scenario(SCENARIO, [*SMALL, f"algorithm.name={method}", *extra])
    algos = build_algorithms(loaded, loaded.federation)
    after: list[dict[str, torch.Tensor]] = [{} for _ in algos]
    for i, a in enumerate(algos):
        def spy(fresh, round, now, a=a, i=i, fuse=a.fuse):
            job = fuse(fresh, round, now)
            if isinstance(job, FusionJob) and round == at:
                job.then.append(lambda: after[i].update({k: v.clone() for k, v in a.ctx.model.state_dict().items()}))
            return job
        a.fuse = spy
    Simulation(algos, build_topology("complete", DEVICES, seed=0), RoundSchedule(ROUNDS, 10.0), Recorder(DEVICES),
               np.random.default_rng(0), max_message_bytes=2**22).run()
    assert all(after), "every device fused"
    return algos, after


def _spread(after: list[dict[str, torch.Tensor]], names: list[str]) -> float:
    """The largest difference between two devices' values of the named tensors."""
    return max(float((s[n].float() - after[0][n].float()).abs().max()) for s in after[1:] for n in names)


def test_lg_fedavg_keeps_the_local_representation_and_pulls_the_global_layers_together():
    algos, after = _after_fusions("lg-fedavg", "algorithm.global_layers=2")
    top, local = algos[0].shared, algos[0].kept
    assert top == ["body.4.weight", "body.4.bias", "body.5.weight", "body.5.bias", "head.weight", "head.bias"]
    assert local == ["body.0.weight", "body.0.bias", "body.1.weight", "body.1.bias"]
    # over the complete graph every device averages the same models: one global model, many local ones
    assert _spread(after, top) < 1e-5
    assert _spread(after, local) > 1e-3


def test_lg_fedavg_starts_from_fedavg_rounds_averaging_the_whole_model():
    """The authors' code starts LG-FedAvg from a FedAvg-trained model: in the FedAvg rounds the
    local layers are averaged too (one model over the complete graph), afterwards no more."""
    fedavg = ("algorithm.global_layers=2", "algorithm.fedavg_rounds=2")
    algos, after = _after_fusions("lg-fedavg", *fedavg, at=1)
    assert _spread(after, algos[0].kept) < 1e-5 and _spread(after, algos[0].shared) < 1e-5
    algos, after = _after_fusions("lg-fedavg", *fedavg, at=2)
    assert _spread(after, algos[0].kept) > 1e-3 and _spread(after, algos[0].shared) < 1e-5
    assert [a.stats()["fusions_changing_local"] for a in algos] == [1] * DEVICES   # round 1's; round 0 has no peers


def test_fedbn_keeps_batch_norm_local_and_averages_the_rest():
    algos, after = _after_fusions("fedbn")
    bn = batch_norm_names(algos[0].ctx.model)
    assert algos[0].kept == bn == ["body.1.weight", "body.1.bias", "body.5.weight", "body.5.bias"]
    assert _spread(after, algos[0].shared) < 1e-5
    assert _spread(after, bn) > 1e-3
    stats = [n for n in after[0] if n.endswith(("running_mean", "running_var"))]
    assert len(stats) == 4 and _spread(after, stats) > 1e-3


@pytest.mark.parametrize(("method", "shared", "kept"), [("lg-fedavg", "global", "local"), ("fedbn", "non_bn", "bn")])
def test_summary_counts_the_fusions_that_changed_each_part(tmp_path, method, shared, kept):
    run_scenario(load_scenario(SCENARIO, [*SMALL, f"algorithm.name={method}"]), tmp_path, progress=False)
    stats = json.loads((tmp_path / "summary.json").read_text())["algorithm_stats"]
    assert stats[f"fusions_changing_{shared}"] == ROUNDS - 1 and stats[f"fusions_changing_{kept}"] == 0, stats
    assert 0 < stats[f"{kept}_parameter_fraction"] < 1


def test_too_many_global_layers_or_fedavg_rounds_are_refused_in_one_line():
    with pytest.raises(ScenarioError, match="algorithm.global_layers: 3 leaves no local layer in a 3-layer model"):
        load_scenario(SCENARIO, [*SMALL, "algorithm.name=lg-fedavg", "model.name=mlp", "model.options={}",
                                 "model.hidden=[8, 8]", "algorithm.global_layers=3"])
    with pytest.raises(ScenarioError, match=f"algorithm.fedavg_rounds: {ROUNDS} leaves no LG-FedAvg round"):
        load_scenario(SCENARIO, [*SMALL, "algorithm.name=lg-fedavg", f"algorithm.fedavg_rounds={ROUNDS}"])


def test_lg_fedavg_refuses_a_model_without_layers_naming_it():
    from p2pfed.testing import make_algorithms
    from p2pfed.testing.checks import default_dataset

    plain = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    with pytest.raises(ValueError, match="declares no layers \\(unit_layer_params\\): lg-fedavg needs them"):
        make_algorithms("lg-fedavg", default_dataset(), model=plain)
