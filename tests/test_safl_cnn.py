"""SAFL on a CNN, as its paper does (issue 33, goal 3): Network Slimming ranks the batch-norm
scales of the conv channels, the guided L1 terms move them, a pruned channel leaves the sub-model
that travels (its filter, bias, BN scale and shift, the next layer's input channel), the
fusions average channel-pruned sub-models over what each holds, and runs go in both runtimes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.func import functional_call

from p2pfed.algorithms.safl.heterogeneous import RobustRule, SubModel, fuse_cluster, preserve_personal
from p2pfed.algorithms.safl.slimming import (element_masks, factor_names, gate_values, guided_sparsity_loss,
                                             kept_parameter_fraction, local_names, pruned_fraction,
                                             sub_model_gradient_masks, recover_units, slim_masks, zero_pruned_factors)
from p2pfed.algorithms.safl.wire import decode_submodel, encode_submodel
from p2pfed.engine.runner import Checkpointing, run_scenario
from p2pfed.learning.cnn import CNN
from p2pfed.learning.training import TrainingConfig, train_epochs
from p2pfed.scenario.build import build_algorithm
from p2pfed.scenario.loader import load_scenario
from p2pfed.scenario.errors import ScenarioError
from p2pfed.testing import train_once
from tests.test_cnn import SCENARIO, SMALL

RUN = [*SMALL, "algorithm.name=safl", "rounds=5", "algorithm.target_rate=0.2", "training.epochs=1",
       "engine.torch_threads=1"]   # two torch threads on a busy 2-core machine: 15x slower


def _cnn(channels=(4, 6), seed: int = 0) -> CNN:
    torch.manual_seed(seed)
    return CNN(64, 10, [1, 8, 8], list(channels), 3)


def _set_scales(model: CNN, *scales: list[float]) -> None:
    with torch.no_grad():
        for (_, bn, _), s in zip(model.blocks(), scales):
            bn.weight.copy_(torch.tensor(s))
            bn.bias.fill_(0.1)


# -- Network Slimming on the BN scales ------------------------------------------------------------
def test_pruning_ranks_the_bn_scales_of_the_channels():
    model = _cnn()
    assert factor_names(model) == ["body.1.weight", "body.5.weight"]          # each block's BN weight γ
    assert local_names(model) == ["body.1.weight", "body.1.bias", "body.5.weight", "body.5.bias"]
    held = element_masks(model, slim_masks(gate_values(model), 0))
    assert list(held) == [n for n, _ in model.named_parameters()]            # no extra gates: all the unit parameters
    _set_scales(model, [0.9, -0.05, 0.3, 0.01], [0.02, -0.7, 0.6, 0.04, 0.5, 0.8])
    masks = slim_masks(gate_values(model), 0.4)                               # 10 channels: prune 4
    pruned = {(li, int(i)) for li, m in enumerate(masks) for i in np.flatnonzero(~m)}
    assert pruned == {(0, 3), (1, 0), (1, 3), (0, 1)}                          # the four smallest |γ|, across blocks
    assert pruned_fraction(masks) == pytest.approx(0.4)
    zero_pruned_factors(model, masks)
    for (_, bn, _), m in zip(model.blocks(), masks):
        assert torch.all(bn.weight[torch.as_tensor(~m)] == 0) and torch.all(bn.bias[torch.as_tensor(~m)] == 0)
        assert torch.all(bn.weight[torch.as_tensor(m)] != 0)


def test_the_channel_pruned_sub_model_is_a_smaller_cnn_that_computes_the_same():
    """The wire carries a real smaller CNN: its tensors load into a CNN with the kept channel
    counts (BN running statistics, a device's own buffers, copied for the kept channels) and give
    the dense pruned model's logits; decoded in place they give them too."""
    model = _cnn()
    x = torch.randn(16, 64)
    model.train()
    model(x)                                  # running statistics away from their initial values
    model.eval()
    _set_scales(model, [0.9, -0.05, 0.3, 0.01], [0.02, -0.7, 0.6, 0.04, 0.5, 0.8])
    masks = slim_masks(gate_values(model), 0.4)
    zero_pruned_factors(model, masks)
    dense_out = model(x).detach()
    payload = encode_submodel(model, masks, num_samples=1)
    t = payload.tensors
    assert t["body.0.weight"].shape == (2, 1, 3, 3) and t["body.1.weight"].shape == (2,)
    assert t["body.4.weight"].shape == (4, 2, 3, 3)                           # kept filters over the kept inputs
    assert t["head.weight"].shape == (10, 4) and t["head.bias"].shape == (10,)
    assert all(not k.endswith(("running_mean", "running_var")) for k in t)    # buffers stay home
    small = CNN(64, 10, [1, 8, 8], [2, 4], 3)
    small.load_state_dict({k: torch.from_numpy(v) for k, v in t.items() if k != "units"}, strict=False)
    for (_, bn, _), (_, small_bn, _), m in zip(model.blocks(), small.blocks(), masks):
        small_bn.running_mean.copy_(bn.running_mean[torch.as_tensor(m)])
        small_bn.running_var.copy_(bn.running_var[torch.as_tensor(m)])
    small.eval()
    torch.testing.assert_close(small(x), dense_out)
    sub = decode_submodel(model, payload)
    assert [m.tolist() for m in sub.masks] == [m.tolist() for m in masks]
    torch.testing.assert_close(functional_call(model, sub.values, (x,)), dense_out)
    held = element_masks(model, masks)
    for name, p in model.named_parameters():
        assert torch.equal(sub.values[name][held[name]], p.detach()[held[name]])
        assert torch.all(sub.values[name][~held[name]] == 0)
    kept = sum(int(v.size) for k, v in t.items() if k != "units")
    assert kept_parameter_fraction(model, masks) == pytest.approx(kept / sum(p.numel() for p in model.parameters()))


def test_pruned_channels_stay_out_while_frozen_and_come_back_with_scale_zero():
    model = _cnn()
    _set_scales(model, [0.9, -0.05, 0.3, 0.01], [0.02, -0.7, 0.6, 0.04, 0.5, 0.8])   # shifts 0.1
    masks = slim_masks(gate_values(model), 0.4)
    shifts = zero_pruned_factors(model, masks)
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    frozen = {n: p.detach().clone() for n, p in model.named_parameters()}
    train_epochs(model, x, y, TrainingConfig(epochs=3, batch_size=8, lr=0.5), torch.Generator().manual_seed(0),
                 gradient_masks=sub_model_gradient_masks(model, masks))
    for (conv, bn, _), m, at in zip(model.blocks(), masks, (0, 4)):
        off = torch.as_tensor(~m)
        for name in (f"body.{at + 1}.weight", f"body.{at + 1}.bias", f"body.{at}.weight"):   # the filter too
            assert torch.equal(dict(model.named_parameters())[name].detach()[off], frozen[name][off]), name
        assert not torch.equal(bn.weight.detach()[~off], frozen[f"body.{at + 1}.weight"][~off])
    recover_units(model, masks, shifts)                                        # ModelRecover
    for (_, bn, _), m in zip(model.blocks(), masks):
        off = torch.as_tensor(~m)
        assert torch.all(bn.weight[off] == 0) and torch.allclose(bn.bias[off], torch.tensor(0.1))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    assert all(bool((bn.weight.grad[torch.as_tensor(~m)] != 0).any()) for (_, bn, _), m in zip(model.blocks(), masks))


def test_the_guided_l1_terms_act_on_the_bn_scales():
    model = _cnn()
    _set_scales(model, [0.9, -0.5, 0.3, 0.2], [0.2, -0.7, 0.6, 0.4, 0.5, 0.8])
    guide = [torch.full((4,), 0.5), torch.full((6,), -0.5)]
    x, y = torch.randn(8, 64), torch.randint(0, 10, (8,))
    term = guided_sparsity_loss(0.01, 0.1, guide)
    term(model, x, y, model(x)).backward()
    for (conv, bn, _), g in zip(model.blocks(), guide):
        expected = 0.01 * torch.sign(bn.weight.detach()) + 0.1 * torch.sign(bn.weight.detach() - g)
        torch.testing.assert_close(bn.weight.grad, expected)
        assert conv.weight.grad is None and bn.bias.grad is None                # only the factors
    # A few steps on the pull alone move every factor toward its cluster's.
    before = [bn.weight.detach().clone() for _, bn, _ in model.blocks()]
    pull = guided_sparsity_loss(0.0, 1.0, guide)
    for _ in range(5):
        model.zero_grad()
        pull(model, x, y, model(x)).backward()
        with torch.no_grad():
            for _, bn, _ in model.blocks():
                bn.weight -= 0.01 * bn.weight.grad
    for (_, bn, _), b, g in zip(model.blocks(), before, guide):
        assert torch.all((bn.weight.detach() - g).abs() < (b - g).abs())


# -- the fusions over channel-pruned sub-models ---------------------------------------------------
def _tiny(value: float) -> CNN:
    """1-D, 4 steps, blocks of 3 then 2 channels, 1-wide kernels, 2 classes; every parameter ``value``."""
    model = CNN(4, 2, [1, 4], [3, 2], 1)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    return model


def test_stage_two_fuses_channel_pruned_sub_models_over_what_each_holds():
    own = _tiny(1.0)
    own_masks = [np.array([1, 1, 0], dtype=bool), np.array([1, 1], dtype=bool)]
    peer_masks = [np.array([1, 0, 1], dtype=bool), np.array([1, 0], dtype=bool)]
    peer = decode_submodel(own, encode_submodel(_tiny(3.0), peer_masks, num_samples=3))   # through the wire
    names = [n for n, _ in own.named_parameters() if n not in set(local_names(own))]
    shared = preserve_personal(own, own_masks, 1.0, [(peer, 3.0)], names)
    both = (1.0 * 1 + 3.0 * 3) / 4                                             # 2.5, weighted by samples
    c0, c1, head = own.body[0], own.body[4], own.head
    assert c0.weight[0].item() == both and c0.bias[0].item() == both          # channel 0: both hold it
    assert c0.weight[1].item() == 1.0 and c0.weight[2].item() == 1.0          # own only; not own (untouched)
    assert c1.weight[0, 0].item() == both                                     # out 0 reads in 0: both hold it
    assert c1.weight[0, 1].item() == 1.0 and c1.weight[1, 0].item() == 1.0    # in 1 / out 1: own only
    assert c1.weight[0, 2].item() == 1.0                                      # in 2: not own
    assert torch.all(head.weight[:, 0] == both) and torch.all(head.weight[:, 1] == 1.0)
    assert torch.all(head.bias == both)
    assert all(torch.all(bn.weight == 1.0) and torch.all(bn.bias == 1.0) for _, bn, _ in own.blocks())  # BN local
    assert 0 < shared < 1
    # robust: the median of the holders' values where both hold an element, the own value elsewhere
    own = _tiny(1.0)
    rule = RobustRule("median")
    preserve_personal(own, own_masks, 1.0, [(peer, 3.0)], names, rule)
    assert own.body[0].weight[0].item() == 2.0 and own.body[0].weight[1].item() == 1.0
    assert torch.all(own.head.weight[:, 0] == 2.0) and rule.offered > 0


def test_the_cluster_model_keeps_the_most_frequent_channels_and_averages_their_holders():
    model = _tiny(0.0)

    def sub(keep, value):
        masks = [np.array(k, dtype=bool) for k in keep]
        held = element_masks(model, masks)
        return SubModel(masks, {n: torch.where(held[n], torch.full_like(p, value), torch.zeros_like(p))
                                for n, p in model.named_parameters()})

    members = [sub([[1, 1, 0], [1, 1]], 1.0), sub([[1, 0, 1], [1, 1]], 2.0), sub([[1, 1, 0], [1, 0]], 3.0)]
    fused = fuse_cluster(model, members, rate=0.2)                             # 5 channels, prune 1
    assert fused.masks[0].tolist() == [True, True, False] and fused.masks[1].tolist() == [True, True]
    assert fused.values["body.1.weight"][0].item() == pytest.approx(2.0)       # BN scale: all three hold it
    assert fused.values["body.1.weight"][1].item() == pytest.approx(2.0)       # members 1 and 3
    assert fused.values["body.5.weight"][1].item() == pytest.approx(1.5)       # members 1 and 2
    assert torch.all(fused.values["body.0.weight"][2] == 0)                    # the pruned channel is gone
    assert fused.values["body.4.weight"][0, 0].item() == pytest.approx(2.0)


# -- runs --------------------------------------------------------------------------------------
def test_safl_takes_the_cnn_and_still_refuses_a_model_without_units():
    assert load_scenario(SCENARIO, RUN).scenario.algorithm.name == "safl"
    with pytest.raises(ScenarioError, match="safl works on the units of a model's layers"):
        load_scenario(SCENARIO, [*RUN, "model.name=../examples/dropout_mlp.py:make_model",
                                 "model.options={hidden: 16, dropout: 0.3}"])


def _check_pruned_channels(stats: dict, channels: int = 12) -> None:
    assert stats["pruning_rate"] == pytest.approx(round(0.2 * channels) / channels, abs=1e-4)   # 2 of 4 + 8 channels
    assert stats["model_size_kept"] < 1.0


def test_a_cnn_safl_run_prunes_channels_in_the_synchronous_runtime(tmp_path):
    summary = run_scenario(load_scenario(SCENARIO, RUN), tmp_path, progress=False)
    stats = json.loads((tmp_path / "summary.json").read_text())["algorithm_stats"]
    assert summary is not None and stats == summary["algorithm_stats"]
    _check_pruned_channels(stats)
    assert stats["stage_two"] == 1.0 and stats["overlap_shared"] > 0           # Hermes over channel overlaps
    assert summary["comm"]["bytes_per_message_vs_full_model"] < 1.0           # only sub-models travel
    assert summary["final"]["f1_macro_mean"] > 0.05


def test_a_cnn_safl_run_prunes_channels_under_contacts(tmp_path):
    sets = [*RUN, "contacts.kind=poisson", "contacts.mean_intercontact_s=100", "contacts.mean_duration_s=30",
            "contacts.duration_s=360", "asynchronous.train_period_s=60", "evaluation.every_s=180"]
    summary = run_scenario(load_scenario(SCENARIO, sets), tmp_path, progress=False)
    assert summary is not None
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["contacts"]["kind"] == "poisson" and s["comm"]["transfers_completed"] > 0
    _check_pruned_channels(s["algorithm_stats"])
    assert s["algorithm_stats"]["stage_two"] > 0


def test_a_device_restored_from_its_state_recovers_the_same_channels():
    """The state carries the pruned channels' BN shifts that ModelRecover gives back: a device
    rebuilt from it between two prunings trains on bit for bit like the original."""
    loaded = load_scenario(SCENARIO, RUN)
    data = loaded.federation
    algo = build_algorithm(loaded, data, 0)
    for r in (0, 1):                                      # r_1 = 0.1 prunes one channel
        train_once(algo, r)
    assert algo.masks[0].sum() + algo.masks[1].sum() == 11 and algo.shifts
    for (at, _), m in zip(algo.model.block_at, algo.masks):
        shift = algo.shifts[f"body.{at + 1}.bias"]
        assert np.all(shift[m] == 0)
        # A channel back with γ = 0 outputs ReLU(β): with β > 0 the loss reaches it (with β <= 0 only
        # the pull toward its cluster's γ does), so the β given back must be the one cut.
        shift[~m] = np.abs(shift[~m]) + 0.1
    again = build_algorithm(loaded, data, 0)
    again.load_state_dict(algo.state_dict())
    for a in (algo, again):
        train_once(a, 2)
    for (n, p), (_, q) in zip(algo.model.named_parameters(), again.model.named_parameters()):
        assert torch.equal(p, q), n


@pytest.mark.slow   # in the slow set .ci/run also runs
def test_a_cnn_safl_run_stopped_and_resumed_ends_bit_identical(tmp_path):
    """Stopped in stage one, between two prunings: the masks, BN buffers and the pruned channels'
    BN shifts (which ModelRecover gives back in the next round) resume too."""
    whole = run_scenario(load_scenario(SCENARIO, RUN), tmp_path / "whole", progress=False)
    ckpt = Checkpointing(tmp_path / "run.ckpt", every=1, stop_after_round=1)
    assert run_scenario(load_scenario(SCENARIO, RUN), None, progress=False, checkpointing=ckpt) is None
    resumed = run_scenario(load_scenario(SCENARIO, RUN), tmp_path / "resumed", progress=False,
                           checkpointing=Checkpointing(ckpt.path))
    assert whole is not None and resumed is not None
    assert (tmp_path / "resumed" / "rounds.csv").read_text() == (tmp_path / "whole" / "rounds.csv").read_text()
    assert (tmp_path / "resumed" / "devices.csv").read_text() == (tmp_path / "whole" / "devices.csv").read_text()
