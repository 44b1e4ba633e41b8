"""FedSub on a CNN (issue 33, goal 2): class subnetworks keep **channels** in convolutions and
units in dense layers; LRP runs through convolutions, batch norm, pooling and the head and
conserves relevance; the compact encoding sends a kept channel's filter, bias and batch-norm
scale and shift once, with one bit per channel and class; a real run shows channels selected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from p2pfed.algorithms.base import ArtifactError, Payload
from p2pfed.algorithms.fedsub.alpha_beta import alpha_beta
from p2pfed.algorithms.fedsub.method import decode_subnetworks, encode_subnetworks
from p2pfed.algorithms.fedsub.subnetworks import extract_unit_masks, lrp_relevances
from p2pfed.engine.runner import run_scenario
from p2pfed.learning.cnn import CNN
from p2pfed.learning.units import unit_layers
from p2pfed.scenario.loader import load_scenario

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "digits-cnn.yaml"
SMALL = ["rounds=2", "training.epochs=1", "dataset.partition.num_devices=8", "topology.k=4", "evaluation.every=1",
         "model.options.channels=[4, 8]", "algorithm.name=fedsub", "engine.torch_threads=1"]


def _positive_cnn(shape: list[int], channels: list[int], classes: int, seed: int) -> CNN:
    """A CNN where every unit gets positive and negative contributions (one inhibitory centre tap
    per filter, always inside the image), identity batch norm and no biases: the alpha-beta rule
    then conserves relevance exactly, layer by layer."""
    gen = torch.Generator().manual_seed(seed)
    model = CNN(int(np.prod(shape)), classes, shape, channels, 3)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Linear)):
                w = torch.rand(module.weight.shape, generator=gen) + 0.5
                flat = w.view(w.shape[0], -1)
                centre = (w[0].numel() // w.shape[1]) // 2 if w.dim() > 2 else 0
                flat[:, centre] *= -0.3
                module.weight.copy_(w)
                module.bias.zero_()
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_mean.zero_()
                module.running_var.fill_(1.0)
                module.weight.fill_(1.3)
                module.bias.zero_()
    return model.eval()


@pytest.mark.parametrize("shape", [[1, 8, 8], [3, 20]])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 1.0)])
def test_lrp_through_a_cnn_conserves_relevance_layer_by_layer(shape, alpha, beta):
    model = _positive_cnn(shape, [5, 6], 4, seed=0)
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(7, int(np.prod(shape)), generator=gen) + 0.1
    target = torch.tensor([0, 1, 2, 3, 0, 1, 2])
    rel = lrp_relevances(model, x, target, alpha, beta)
    assert [r.shape[1] for r in rel] == [int(np.prod(shape)), 5, 6, 4]   # input, channels, channels, classes
    start = model(x)[torch.arange(7), target].detach()
    assert bool((start > 0).all())
    for r in rel:   # every layer carries the class score: channels' relevances summed over positions
        torch.testing.assert_close(r.sum(dim=1), start, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 1.0)])
def test_the_convolution_rule_equals_the_dense_rule_on_the_unrolled_convolution(alpha, beta):
    """A convolution is a dense layer over flattened maps: its alpha-beta step must equal the
    dense step on that matrix, on mixed-sign inputs, weights and relevances."""
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(3, 2, 5, 5, generator=gen)
    w = torch.randn(4, 2, 3, 3, generator=gen)
    rel = torch.randn(3, 4, 5, 5, generator=gen)
    basis = torch.eye(2 * 5 * 5).view(-1, 2, 5, 5)
    dense = F.conv2d(basis, w, padding=1).flatten(1).T          # (out values, in values)
    got = alpha_beta(a, w, rel, alpha, beta, lambda x, k: F.conv2d(x, k, padding=1),
                     lambda r, k: torch.nn.grad.conv2d_input(a.shape, k, r, padding=1))
    want = alpha_beta(a.flatten(1), dense, rel.flatten(1), alpha, beta, lambda x, m: x @ m.T, lambda r, m: r @ m)
    torch.testing.assert_close(got.flatten(1), want, rtol=1e-4, atol=1e-5)


PATTERNS = [np.array([[0, 0, 0], [1, 1, 1], [0, 0, 0]]),    # class 0: a horizontal stroke
            np.array([[0, 1, 0], [0, 1, 0], [0, 1, 0]]),    # class 1: a vertical stroke
            np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]])]    # class 2: a diagonal


def _planted_images(per_class: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """8x8 images holding their class's 3x3 stroke at a random place on a blank background."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c, pattern in enumerate(PATTERNS):
        for _ in range(per_class):
            image = np.zeros((8, 8), dtype=np.float32)
            r, col = rng.integers(0, 6, size=2)
            image[r:r + 3, col:col + 3] = pattern
            xs.append(image.reshape(-1))
            ys.append(c)
    return torch.tensor(np.array(xs)), torch.tensor(ys)


def _stroke_detector() -> CNN:
    """Channel k matches stroke k (+1 on it, -1 around it, bias -1.5: fires only on that stroke,
    any two strokes share at most one cell); channel 3 is a dead filter; the head reads channel k
    for class k."""
    model = CNN(64, 3, [1, 8, 8], [4], 3)
    with torch.no_grad():
        conv, norm = model.body[0], model.body[1]
        conv.weight.zero_()
        conv.bias.fill_(-1.5)
        for k, pattern in enumerate(PATTERNS):
            conv.weight[k, 0] = torch.tensor(2.0 * pattern - 1.0)
        norm.running_mean.zero_()
        norm.running_var.fill_(1.0)
        norm.weight.fill_(1.0)
        norm.bias.zero_()
        model.head.weight.copy_(torch.eye(3, 4))
        model.head.bias.zero_()
    return model.eval()


@pytest.mark.parametrize("extraction", ["naive", "lrp-a1b0", "lrp-a2b1"])
def test_per_channel_extraction_keeps_the_channel_that_detects_the_class(extraction):
    x, y = _planted_images(20, seed=3)
    model = _stroke_detector()
    assert (model(x).argmax(dim=1) == y).all()   # the hand-made detector is right
    masks = extract_unit_masks(extraction, model, x, y, np.array([0, 1, 2]))
    for c in range(3):
        channels, classes = masks[c]
        assert channels.tolist() == [k == c for k in range(4)], (extraction, c, channels)
        assert classes.tolist() == [k == c for k in range(3)]


def test_the_subnetwork_encoding_sends_each_kept_channel_once_with_its_batch_norm(tmp_path):
    model = _positive_cnn([1, 8, 8], [4, 8], 3, seed=4)
    layers = unit_layers(model)
    assert [layer.size for layer in layers] == [4, 8, 3]
    assert layers[1].params == ("body.4.weight", "body.4.bias", "body.5.weight", "body.5.bias")
    units = {0: [np.array([1, 0, 1, 0], bool), np.array([1, 1, 0, 0, 0, 0, 0, 1], bool), np.array([1, 0, 0], bool)],
             2: [np.array([1, 1, 0, 0], bool), np.array([0, 1, 0, 0, 0, 0, 0, 0], bool), np.array([0, 0, 1], bool)]}
    params = dict(model.named_parameters())
    tensors = encode_subnetworks(params, layers, units)
    assert tensors["units"].shape == (2, 2)                        # 15 units: one bit each, two bytes per class
    assert tensors["body.0.weight"].shape == (3, 1, 3, 3)          # channels 0, 1, 2: the union, once
    assert tensors["body.5.weight"].shape == (3,)                  # their batch-norm scales
    decoded, values = decode_subnetworks(layers, [0, 2], Payload({}, tensors))
    assert [m.tolist() for m in decoded[2]] == [m.tolist() for m in units[2]]
    kept = torch.tensor([True, True, True, False])
    for name in ("body.0.weight", "body.0.bias", "body.1.weight", "body.1.bias"):
        torch.testing.assert_close(values[name][kept], params[name].detach()[kept])
        assert not bool(values[name][~kept].any())
    narrower = CNN(64, 3, [1, 8, 8], [4, 6], 3)
    with pytest.raises(ArtifactError, match=r"body.4.weight' has shape \(3, 4, 3, 3\), expected \(2, 4, 3, 3\)"):
        decode_subnetworks(unit_layers(narrower), [0, 2], Payload({}, tensors))


def _run(tmp_path: Path, *extra: str) -> dict:
    summary = run_scenario(load_scenario(SCENARIO, [*SMALL, *extra]), tmp_path, progress=False)
    assert summary is not None
    return summary


@pytest.mark.slow   # a whole run (about 30 s): in the slow set .ci/run also runs
def test_fedsub_runs_on_a_cnn_and_its_lrp_subnetworks_select_channels(tmp_path):
    summary = _run(tmp_path, "algorithm.extraction=lrp-a1b0")
    stats = summary["algorithm_stats"]
    kept = stats["subnetwork_kept_fraction_by_layer"]
    assert set(kept) == {"body.0", "body.4", "head"}
    assert 0.0 < kept["body.0"] < 1.0 and 0.0 < kept["body.4"] < 1.0   # channels chosen per class
    assert kept["head"] < 0.5                                           # mostly the class's own logit
    assert stats["fusions_with_mate_fraction"] > 0.5 and stats["k_mean"] >= 1
    assert stats["subnet_message_bytes"] < stats["subnet_message_bytes_paper_style"]
    assert summary["final"]["f1_macro_mean"] > 0.1


def test_fedsub_on_a_cnn_exchanges_over_contacts(tmp_path):
    summary = _run(tmp_path, "algorithm.exchange=two-phase", "contacts.kind=poisson", "contacts.duration_s=600",
                   "contacts.mean_intercontact_s=60", "contacts.mean_duration_s=30", "asynchronous.train_period_s=60",
                   "evaluation.every_s=300")
    assert summary["contacts"]["contacts"] > 0
    assert summary["algorithm_stats"]["fusions_with_mate_fraction"] > 0.0
