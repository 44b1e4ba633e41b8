"""``model.name: cnn`` (issue 33, goal 1): a small CNN with batch norm over 2-D images or 1-D
sensor windows, run by the methods that take any model, refused in one line by those that work on
the MLP's units, and resumed from a checkpoint bit for bit (batch norm's buffers included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from p2pfed.engine.runner import Checkpointing, run_scenario
from p2pfed.learning.cnn import CNN, make_cnn
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.loader import load_scenario

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "digits-cnn.yaml"
SMALL = ["rounds=4", "dataset.partition.num_devices=8", "topology.k=4", "evaluation.every=1",
         "model.options.channels=[4, 8]"]


def test_the_cnn_views_flat_rows_as_images_or_windows():
    image = make_cnn(64, 10, torch.Generator(), shape=[1, 8, 8])
    assert any(isinstance(m, nn.Conv2d) for m in image.modules())
    assert any(isinstance(m, nn.BatchNorm2d) for m in image.modules())
    assert image(torch.randn(5, 64)).shape == (5, 10) and image.features(torch.randn(5, 64)).shape == (5, 32)
    window = make_cnn(3 * 20, 6, torch.Generator(), shape=[3, 20], channels=[8])
    assert any(isinstance(m, nn.Conv1d) for m in window.modules())
    assert window(torch.randn(2, 60)).shape == (2, 6) and isinstance(window.head, nn.Linear)
    assert make_cnn(49, 2, torch.Generator()).shape == (1, 7, 7)        # square input: one-channel image
    assert make_cnn(10, 2, torch.Generator()).shape == (1, 10)          # otherwise one-channel series
    with pytest.raises(ValueError, match=r"model.options.shape \[2, 8, 8\] holds 128 values"):
        CNN(64, 10, [2, 8, 8], [4], 3)
    with pytest.raises(ValueError, match="kernel a positive odd size"):
        CNN(64, 10, [1, 8, 8], [4], 2)


def test_batch_norm_false_leaves_batch_norm_out_and_keeps_the_blocks_layout():
    """SAFL's paper runs its FedAvg baseline on its CNN without the batch-norm layers."""
    with_bn = make_cnn(64, 10, torch.Generator(), shape=[1, 8, 8], channels=[4, 8])
    without = make_cnn(64, 10, torch.Generator(), shape=[1, 8, 8], channels=[4, 8], batch_norm=False)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in without.modules())
    assert {n for n, _ in without.named_parameters()} == {n for n, _ in with_bn.named_parameters()
                                                          if not n.startswith(("body.1.", "body.5."))}
    assert without.unit_layer_params() == [("body.0.weight", "body.0.bias"), ("body.4.weight", "body.4.bias"),
                                           ("head.weight", "head.bias")]
    assert with_bn.unit_layer_params() == [("body.0.weight", "body.0.bias", "body.1.weight", "body.1.bias"),
                                           ("body.4.weight", "body.4.bias", "body.5.weight", "body.5.bias"),
                                           ("head.weight", "head.bias")]
    assert without(torch.randn(3, 64)).shape == (3, 10) and not list(without.buffers())
    with pytest.raises(ValueError, match="model.options.batch_norm must be true or false, got 'no'"):
        make_cnn(64, 10, torch.Generator(), batch_norm="no")


def test_gossip_avg_and_fedsub_lrp_run_a_cnn_without_batch_norm_and_safl_refuses_it():
    off = [*SMALL, "rounds=2", "model.options.batch_norm=false"]
    for method in (["algorithm.name=gossip-avg"], ["algorithm.name=fedsub", "algorithm.extraction=lrp-a1b0"]):
        summary = run_scenario(load_scenario(SCENARIO, [*off, *method]), progress=False)
        assert summary is not None and summary["final"]["f1_macro_mean"] > 0
    with pytest.raises(ScenarioError, match="model.options.batch_norm: SAFL prunes a CNN.s channels by their"):
        load_scenario(SCENARIO, [*off, "algorithm.name=safl", "algorithm.target_rate=0.1"])


def test_methods_that_take_any_model_run_it():
    summary = run_scenario(load_scenario(SCENARIO, [*SMALL, "algorithm.name=gossip-avg"]), progress=False)
    assert summary is not None and summary["final"]["f1_macro_mean"] > 0.1


@pytest.mark.slow   # in the slow set .ci/run also runs
@pytest.mark.parametrize("method", [["algorithm.name=gossip-avg"], ["algorithm.name=fedper"],
                                    ["algorithm.name=fedsub", "algorithm.extraction=lrp-a1b0"]],
                         ids=["gossip-avg", "fedper", "fedsub-lrp"])
def test_a_cnn_run_stopped_and_resumed_ends_bit_identical(method, tmp_path):
    """Batch norm's running statistics are buffers each device keeps: the checkpoint must carry them
    (FedSub: its subnetworks of channels too)."""
    loaded = load_scenario(SCENARIO, [*SMALL, *method])
    whole = run_scenario(loaded, tmp_path / "whole", progress=False)
    ckpt = Checkpointing(tmp_path / "run.ckpt", every=1, stop_after_round=2)
    assert run_scenario(load_scenario(SCENARIO, [*SMALL, *method]), None, progress=False,
                        checkpointing=ckpt) is None
    resumed = run_scenario(load_scenario(SCENARIO, [*SMALL, *method]), tmp_path / "resumed",
                           progress=False, checkpointing=Checkpointing(ckpt.path))
    assert whole is not None and resumed is not None
    assert (tmp_path / "resumed" / "rounds.csv").read_text() == (tmp_path / "whole" / "rounds.csv").read_text()
    assert (tmp_path / "resumed" / "devices.csv").read_text() == (tmp_path / "whole" / "devices.csv").read_text()


def test_a_cnn_training_step_counts_its_convolutions():
    """The energy model's work of a CNN sample: each convolution's outputs times its inputs per
    output, plus the head (8x8 input, 4 then 8 channels, 3x3 kernels, a 2-wide pooling after each)."""
    from p2pfed.energy.work import forward_macs
    model = make_cnn(64, 10, torch.Generator(), shape=[1, 8, 8], channels=[4, 8])
    expected = 4 * 8 * 8 * (1 * 9) + 8 * 4 * 4 * (4 * 9) + 8 * 10
    assert forward_macs(model, 64) == expected
    assert model.training   # counting leaves the model's mode as it was


@pytest.mark.slow   # in the slow set .ci/run also runs: real processes, about 30 s each
@pytest.mark.parametrize("method", [["algorithm.name=fedsub", "algorithm.extraction=lrp-a1b0"],
                                    ["algorithm.name=safl", "rounds=6"],
                                    ["algorithm.name=fedpews", "algorithm.warmup_rounds=2"]],
                         ids=["fedsub-lrp", "safl", "fedpews"])
def test_real_peers_run_the_unit_methods_on_a_cnn(method, tmp_path):
    """Real ZeroMQ peers (one process each) run the methods that work on channels, their
    mechanism firing as in the simulator."""
    from p2pfed.cli.main import main

    sets = [*SMALL, "dataset.partition.num_devices=4", "topology.k=2", "training.epochs=1",
            "engine.torch_threads=1", *method]
    code = main(["launch", str(SCENARIO), "--out", str(tmp_path / "peers"), "--insecure", "--round-timeout", "40",
                 *[arg for s in sets for arg in ("--set", s)]])
    assert code == 0, (tmp_path / "peers" / "peers" / "peer-0" / "peer.log").read_text()[-2000:]
    stats = json.loads((tmp_path / "peers" / "summary.json").read_text())["algorithm_stats"]
    if "fedsub" in method[0]:
        assert 0 < stats["subnetwork_kept_fraction_by_layer"]["body.4"] < 1 and stats["fusions_with_mate_fraction"] > 0
    elif "safl" in method[0]:
        assert stats["stage_two"] == 1.0 and stats["model_size_kept"] < 1.0
    else:
        assert stats["warmup_rounds_done"] == 2 and stats["phase_switches"] == 1
