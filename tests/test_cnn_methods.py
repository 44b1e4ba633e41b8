"""The unit, prototype-alignment and body/head methods on ``model.name: cnn`` (issue 33, goal 4):
FedPeWS's masks select a conv block's channels as they select an MLP's neurons, FedAli's ALP
layer sits on the CNN's ``features(x)``, FedPer/FedRep keep the CNN's ``head`` on the device.
Each runs in the synchronous and in the contact runtime with its mechanism seen in its stats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from p2pfed.algorithms import Received
from p2pfed.algorithms.fedali.alignment import AlignedModel
from p2pfed.algorithms.fedpews.neuron_masks import fixed_units, parameter_masks
from p2pfed.engine.runner import Checkpointing, run_scenario
from p2pfed.learning.cnn import CNN
from p2pfed.learning.units import unit_activations, unit_layers
from p2pfed.scenario.build import build_algorithm
from p2pfed.scenario.loader import load_scenario
from p2pfed.scenario.errors import ScenarioError
from p2pfed.testing import fuse_once, train_once

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "digits-cnn.yaml"
SMALL = ["rounds=4", "dataset.partition.num_devices=8", "topology.k=4", "evaluation.every=1",
         "model.options.channels=[4, 8]", "engine.torch_threads=1"]   # 2 threads on 2 busy cores: 10x slower
CONTACTS = ["contacts.kind=poisson", "contacts.duration_s=600", "contacts.mean_intercontact_s=100",
            "contacts.mean_duration_s=30", "asynchronous.train_period_s=60", "evaluation.every_s=300"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _loaded(name: str, *extra: str):
    return load_scenario(SCENARIO, [*SMALL, f"algorithm.name={name}", *extra])


def _devices(name: str, *extra: str, count: int = 2):
    loaded = _loaded(name, *extra)
    dataset = loaded.federation
    return [build_algorithm(loaded, dataset, i) for i in range(count)]


def _give(to, sender: int, payload) -> None:
    to.receive(Received(sender=sender, round=0, sent_at=0.0, received_at=0.0, payload=payload))


# -- FedPeWS: channel masks --------------------------------------------------------------------------
def test_fedpews_masks_select_a_conv_blocks_channels_and_train_only_them():
    """FedPeWS-Fixed's group-1 subnetwork on the CNN: its units are channels; the dropped
    channels' filters, biases and batch-norm scales and shifts stay as they were, so do the next
    block's filter slices and the head's columns that read them; the kept ones train; a dropped
    channel's activation in the evaluated subnetwork is zero."""
    a, b = _devices("fedpews-fixed", "algorithm.warmup_rounds=3", "algorithm.groups=2",
                    "algorithm.shared_fraction=0.25")
    model = a.ctx.model
    assert isinstance(model, CNN) and a.sizes == [4, 8]    # units per conv block: its channels
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    train_once(a, 0)
    expected = fixed_units([4, 8], 2, 0, 0.25)
    assert all(torch.equal(u, e) for u, e in zip(a.units, expected))
    masks = parameter_masks(model, expected)
    conv1 = unit_layers(model)[1].params[0]                    # the second block's filters
    assert masks[conv1].shape == model.get_parameter(conv1).shape and masks[conv1].dim() == 4
    assert torch.equal(masks[conv1][:, :, 1, 1], expected[1].unsqueeze(1) & expected[0].unsqueeze(0))
    assert torch.equal(masks["head.weight"], expected[1].expand(10, 8))   # every class reads the kept channels
    conv_biases = {layer.params[1] for layer in unit_layers(model)[:-1]}   # batch norm cancels their gradient
    for name, p in model.named_parameters():
        assert torch.equal(p.detach()[~masks[name]], before[name][~masks[name]]), name   # outside: untouched
        if name not in conv_biases:
            assert not torch.equal(p.detach()[masks[name]], before[name][masks[name]]), name  # inside: trained
    evaluated = a.evaluated_model()
    evaluated.eval()
    with torch.no_grad():
        acts = unit_activations(evaluated, a.ctx.x_test)
    for layer, keep in enumerate(expected):
        assert float(acts[layer][:, ~keep].abs().max()) == 0.0 and float(acts[layer][:, keep].abs().max()) > 0
    # The wire: only the kept filters (and their kept input channels) and one bit per channel.
    share = a.share(0)
    assert share.tensors[conv1].shape == (int(expected[1].sum()), int(expected[0].sum()), 3, 3)
    assert share.tensors["head.weight"].shape == (10, int(expected[1].sum()))
    assert np.unpackbits(share.tensors["units"], count=12).astype(bool).tolist() == torch.cat(expected).tolist()
    _give(b, 0, share)
    decoded = b.decode(share)
    for name, p in model.named_parameters():
        assert torch.equal(decoded.values[name], torch.where(masks[name], p.detach(), 0.0)), name


@pytest.mark.slow   # whole runs in both runtimes: in the slow set .ci/run also runs
@pytest.mark.parametrize("name", ["fedpews", "fedpews-fixed"])
def test_fedpews_runs_a_cnn_in_rounds_and_over_contacts(name):
    rounds = run_scenario(_loaded(name, "algorithm.warmup_rounds=2"), progress=False)
    contacts = run_scenario(_loaded(name, "algorithm.warmup_rounds=4", *CONTACTS), progress=False)
    assert contacts["contacts"]["contacts"] > 0 and contacts["comm"]["transfers_completed"] > 0
    for summary, warmup in ((rounds, 2), (contacts, 4)):
        stats = summary["algorithm_stats"]
        assert stats["warmup_rounds_done"] == warmup and stats["phase_switches"] == 1, stats
        assert 0.1 < stats["mask_density"] < 0.9 and 0 < stats["mask_overlap"] < 1, stats
        if name == "fedpews":
            assert stats["score_change"] > 0.1, stats
        assert summary["final"]["f1_macro_mean"] > 0.05
    # the warmup's shares carry subnetworks: fewer bytes than whole models every round
    gossip = run_scenario(_loaded("gossip-avg"), progress=False)
    assert rounds["comm"]["bytes_sent_total"] < 0.95 * gossip["comm"]["bytes_sent_total"]


def test_fedpews_accepts_the_cnn_and_still_checks_its_warmup():
    _loaded("fedpews")
    with pytest.raises(ScenarioError, match="algorithm.warmup_rounds: 4 leaves no round"):
        _loaded("fedpews", "algorithm.warmup_rounds=4")


@pytest.mark.slow   # in the slow set .ci/run also runs
@pytest.mark.parametrize("name", ["fedpews", "fedpews-fixed"])
def test_a_fedpews_cnn_run_stopped_in_its_warmup_and_resumed_ends_bit_identical(name, tmp_path):
    """Stopped in the warmup (round 2 of 4, warmup 3): the scores, the round's mask, the device's
    random stream and batch norm's running statistics must all come back."""
    extra = ["algorithm.warmup_rounds=3"]
    whole = run_scenario(_loaded(name, *extra), tmp_path / "whole", progress=False)
    ckpt = Checkpointing(tmp_path / "run.ckpt", every=1, stop_after_round=2)
    assert run_scenario(_loaded(name, *extra), None, progress=False, checkpointing=ckpt) is None
    resumed = run_scenario(_loaded(name, *extra), tmp_path / "resumed", progress=False,
                           checkpointing=Checkpointing(ckpt.path))
    assert whole is not None and resumed is not None
    for results in ("rounds.csv", "devices.csv"):
        assert (tmp_path / "resumed" / results).read_text() == (tmp_path / "whole" / results).read_text()
    assert resumed["algorithm_stats"] == whole["algorithm_stats"]


# -- FedAli: the ALP layer on the CNN's embedding -------------------------------------------------------
def test_fedali_aligns_the_cnns_features_before_its_head():
    a, = _devices("fedali", "algorithm.prototypes=8", count=1)
    net = a.net
    assert isinstance(net, AlignedModel) and net.body is a.ctx.model and isinstance(net.body, CNN)
    assert a.alp.local_prototypes.shape == (8, 8)      # d = the last block's channels
    seen = {}
    a.alp.register_forward_hook(lambda module, inputs, output: seen.update(inputs=inputs[0], output=output))
    net.eval()
    x = a.ctx.x_test[:5]
    with torch.no_grad():
        logits = net(x)
        assert torch.equal(seen["inputs"], net.body.features(x))          # the ALP reads features(x)
        assert torch.equal(logits, net.body.head(seen["output"]))        # and the head reads the ALP
        assert not torch.allclose(logits, net.body(x))                   # so it changes the output
    torch.testing.assert_close(seen["output"].norm(dim=1), torch.ones(5))


def test_fedali_refuses_hidden_layer_on_a_cnn_in_one_line():
    with pytest.raises(ScenarioError) as refused:
        _loaded("fedali", "algorithm.hidden_layer=1")
    lines = str(refused.value).strip().splitlines()
    assert len(lines) == 1 and "algorithm.hidden_layer: picks a layer of the MLP; 'cnn'" in lines[0], lines


@pytest.mark.slow   # whole runs in both runtimes: in the slow set .ci/run also runs
def test_fedali_runs_a_cnn_in_rounds_and_over_contacts():
    rounds = run_scenario(_loaded("fedali", "algorithm.prototypes=8"), progress=False)
    contacts = run_scenario(_loaded("fedali", "algorithm.prototypes=8", *CONTACTS), progress=False)
    assert contacts["contacts"]["contacts"] > 0 and contacts["comm"]["transfers_completed"] > 0
    for summary in (rounds, contacts):
        stats = summary["algorithm_stats"]
        assert stats["local_prototype_movement"] > 0 and stats["global_prototype_shift"] > 0, stats
        assert stats["kmeans_fusions"] > 0 and 1 <= stats["global_prototypes_assigned"] <= 8, stats
        assert 0 < stats["plan_marginal_error"] < 1, stats
    assert rounds["algorithm_stats"]["kmeans_fusions"] == 3      # every round after the first
    # a share carries the CNN, the GLU and the local prototypes: more than the bare model
    assert rounds["comm"]["bytes_per_message_vs_full_model"] > 1


# -- FedPer / FedRep: the CNN's head stays on the device ------------------------------------------------
@pytest.mark.parametrize("name", ["fedper", "fedrep"])
def test_the_cnns_head_stays_local_and_its_body_is_shared(name):
    a, b = _devices(name)
    assert a.head == ["head.weight", "head.bias"]
    assert a.body == [n for n, _ in a.ctx.model.named_parameters() if not n.startswith("head.")]
    train_once(a, 0)
    train_once(b, 0)
    share = b.share(0)
    assert set(share.tensors) == set(a.body)     # no head, no batch-norm running statistics
    before = {n: p.detach().clone() for n, p in a.ctx.model.named_parameters()}
    buffers = {n: t.clone() for n, t in a.ctx.model.named_buffers()}
    _give(a, 1, share)
    assert fuse_once(a, 1, 1.0)
    after = dict(a.ctx.model.named_parameters())
    assert all(not torch.equal(after[n].detach(), before[n]) for n in a.body)
    assert all(torch.equal(after[n].detach(), before[n]) for n in a.head)
    assert all(torch.equal(t, buffers[n]) for n, t in a.ctx.model.named_buffers())


@pytest.mark.slow   # whole runs in both runtimes: in the slow set .ci/run also runs
@pytest.mark.parametrize("name", ["fedper", "fedrep"])
def test_fedper_and_fedrep_run_a_cnn_in_rounds_and_over_contacts(name):
    quick = ["algorithm.head_epochs=2"] if name == "fedrep" else []
    for extra in ([], CONTACTS):
        summary = run_scenario(_loaded(name, *quick, *extra), progress=False)
        stats = summary["algorithm_stats"]
        assert stats["fusions_changing_body"] > 0 and stats["fusions_changing_head"] == 0, stats
        assert summary["final"]["f1_macro_mean"] > 0.05


def test_head_layers_on_a_cnn_is_refused_in_one_line():
    with pytest.raises(ScenarioError) as refused:
        _loaded("fedrep", "algorithm.head_layers=2")
    lines = str(refused.value).strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(
        "algorithm.head_layers: counts the MLP's layers; 'cnn' keeps its `head` module (the last layer) "
        "local: leave head_layers out"), lines


# -- the method contract on a CNN -----------------------------------------------------------------------
@pytest.mark.slow   # 10-20 s each
@pytest.mark.parametrize("name", ["fedpews", "fedpews-fixed", "fedali", "fedper", "fedrep", "lg-fedavg", "fedbn"])
def test_each_method_keeps_the_contract_on_a_cnn(name):
    """The contract suite (malformed payloads refused, seeded numbers, state round trips, ...) on a
    1-D CNN of two blocks over the suite's 6-feature rows (16 and 32 channels: with fewer, the
    tensors' headers outweigh their values and the wire-precision check cannot see the saving)."""
    from p2pfed.algorithms import ALGORITHMS
    from p2pfed.learning.cnn import make_cnn
    from p2pfed.testing import check_algorithm

    options = {"fedpews": {"warmup_rounds": 2}, "fedpews-fixed": {"warmup_rounds": 2}, "fedali": {"prototypes": 4},
               "fedrep": {"head_epochs": 1}, "lg-fedavg": {"fedavg_rounds": 2}}.get(name, {})
    model = make_cnn(6, 3, torch.Generator().manual_seed(0), channels=[16, 32])
    check_algorithm(ALGORITHMS[name], options, model=model)
