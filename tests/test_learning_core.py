"""Prototypes, naive subnetwork masks and fusion rules, checked against values worked by hand."""

import numpy as np
import pytest
import torch

from reference_fusion import (cluster_average, cluster_leadership, combine_cluster_updates,
                                    overlapping_components)
from p2pfed.learning.model import MLP
from p2pfed.learning.prototypes import class_prototypes
from p2pfed.algorithms.fedsub.subnetworks import naive_unit_masks, parameter_masks, union_units


@pytest.fixture
def tiny():
    """2 inputs → 2 hidden ReLU units → 2 logits, with weights chosen so every value is easy."""
    model = MLP(2, [2], 2)
    with torch.no_grad():
        model.layers[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        model.layers[0].bias.copy_(torch.tensor([0.0, -10.0]))
        model.layers[1].weight.copy_(torch.tensor([[1.0, 1.0], [-1.0, 1.0]]))
        model.layers[1].bias.zero_()
    x = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 20.0], [2.0, 20.0]])
    y = torch.tensor([0, 0, 1, 1])
    return model, x, y


def test_prototypes_are_mean_penultimate_features(tiny):
    model, x, y = tiny
    classes, protos, counts = class_prototypes(model, x, y, num_classes=3)
    # class 0: h = [1,0], [3,0] → [2,0];  class 1: h = [0,10], [2,10] → [1,10];  class 2 absent
    assert classes.tolist() == [0, 1]
    np.testing.assert_allclose(protos, [[2.0, 0.0], [1.0, 10.0]])
    assert counts.tolist() == [2, 2]


def test_naive_masks_keep_units_with_positive_mean_activation(tiny):
    model, x, y = tiny
    masks = naive_unit_masks(model, x, y, np.array([0, 1]))
    # class 0: hidden means [2, 0] → unit 1 never fires; logits [1,-1],[3,-3] → means [2,-2]
    assert [m.tolist() for m in masks[0]] == [[True, False], [True, False]]
    # class 1: hidden means [1, 10]; logits [10,10],[12,8] → means [11, 9]
    assert [m.tolist() for m in masks[1]] == [[True, True], [True, True]]
    pm = parameter_masks(model, masks[0])
    assert pm["layers.0.weight"].tolist() == [[True, True], [False, False]]
    assert pm["layers.0.bias"].tolist() == [True, False]
    assert pm["layers.1.weight"].tolist() == [[True, True], [False, False]]
    assert [u.tolist() for u in union_units(masks)] == [[True, True], [True, True]]


def _t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_overlapping_components_hand_example():
    a, ma = {"w": _t([[1, 2], [3, 4]])}, {"w": torch.tensor([[True, True], [False, True]])}
    b, mb = {"w": _t([[3, 6], [5, 8]])}, {"w": torch.tensor([[True, False], [True, True]])}
    fused, mask = overlapping_components([a, b], [ma, mb], scores=[1.0, 3.0])
    # weights normalised by the max: 1/3 and 1 → (A + 3B) / 4 on the common entries only
    assert mask["w"].tolist() == [[True, False], [False, True]]
    np.testing.assert_allclose(fused["w"].numpy(), [[2.5, 0.0], [0.0, 7.0]])
    # equal scores: the plain mean of the common entries
    fused_eq, _ = overlapping_components([a, b], [ma, mb], scores=[1.0, 1.0])
    np.testing.assert_allclose(fused_eq["w"].numpy(), [[2.0, 0.0], [0.0, 6.0]])


def test_combine_cluster_updates_averages_covering_clusters_and_keeps_the_rest():
    own = {"w": _t([[9, 9], [9, 9]])}
    upd1 = ({"w": _t([[2.5, 0], [0, 7]])}, {"w": torch.tensor([[True, False], [False, True]])})
    upd2 = ({"w": _t([[1.5, 1], [0, 0]])}, {"w": torch.tensor([[True, True], [False, False]])})
    new, changed = combine_cluster_updates(own, [upd1, upd2])
    np.testing.assert_allclose(new["w"].numpy(), [[2.0, 1.0], [9.0, 7.0]])
    assert changed["w"].tolist() == [[True, True], [False, True]]


def test_cluster_average_ignores_absent_entries_and_leadership_takes_the_best():
    a, ma = {"w": _t([[2, 4]])}, {"w": torch.tensor([[True, False]])}
    b, mb = {"w": _t([[6, 8]])}, {"w": torch.tensor([[True, True]])}
    fused, covered = cluster_average([a, b], [ma, mb], scores=[1.0, 1.0])
    np.testing.assert_allclose(fused["w"].numpy(), [[4.0, 8.0]])
    assert covered["w"].tolist() == [[True, True]]
    lead, lead_mask = cluster_leadership([a, b], [ma, mb], scores=[0.2, 0.9])
    np.testing.assert_allclose(lead["w"].numpy(), [[6.0, 8.0]])
    assert lead_mask["w"].tolist() == [[True, True]]


@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 1.0)])
def test_lrp_conserves_relevance_layer_by_layer(alpha, beta):
    from p2pfed.algorithms.fedsub.subnetworks import lrp_relevances

    # The alpha-beta rule conserves relevance exactly when class scores are positive and every
    # unit gets both positive and negative contributions: build such a model on purpose.
    gen = torch.Generator().manual_seed(0)
    model = MLP(5, [7, 6], 3)
    with torch.no_grad():
        for layer in model.layers:
            w = torch.rand(layer.weight.shape, generator=gen) + 0.5
            w[:, 0] = -0.3 * w[:, 0]  # one inhibitory input per unit, the rest excitatory
            layer.weight.copy_(w)
            layer.bias.zero_()  # biases absorb no relevance
    x = torch.rand(9, 5, generator=gen) + 0.1
    target = torch.tensor([0, 1, 2] * 3)
    rel = lrp_relevances(model, x, target, alpha, beta)
    start = model(x)[torch.arange(9), target]
    assert bool((start > 0).all())
    for r in rel:  # every layer carries the same total per sample: the class score
        torch.testing.assert_close(r.sum(dim=1), start, rtol=1e-4, atol=1e-5)


def test_lrp_masks_keep_only_units_with_positive_relevance(tiny):
    from p2pfed.algorithms.fedsub.subnetworks import extract_unit_masks

    model, x, y = tiny
    masks = extract_unit_masks("lrp-a1b0", model, x, y, np.array([0, 1]))
    # class 0: only output unit 0 holds relevance; hidden unit 1 is silent (relu 0) → none
    assert [m.tolist() for m in masks[0]] == [[True, False], [True, False]]
    # class 1: logit 1 = -h0 + h1; its relevance flows to h1 only under alpha=1, beta=0
    assert [m.tolist() for m in masks[1]] == [[False, True], [False, True]]


@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 1.0)])
def test_lrp_matches_the_dense_alpha_beta_formula(alpha, beta):
    """The matrix-product form equals Eq. 3-5 written out over every (sample, unit, input)
    contribution, on mixed-sign inputs, random weights and a dead unit."""
    from p2pfed.algorithms.fedsub.subnetworks import lrp_relevances

    gen = torch.Generator().manual_seed(1)
    model = MLP(6, [9, 8], 4)
    with torch.no_grad():
        model.layers[0].weight[3] = 0.0          # a unit with no contributions at all
    x = torch.randn(11, 6, generator=gen)
    target = torch.randint(0, 4, (11,), generator=gen)
    acts = model.activations(x)
    rel = torch.zeros_like(acts[-1])
    rel[torch.arange(11), target] = acts[-1][torch.arange(11), target]
    expected = [rel]
    for layer, a in zip(reversed(model.layers), reversed([x, *acts[:-1]])):
        z = a.unsqueeze(1) * layer.weight.unsqueeze(0)
        zp, zn = z.clamp(min=0), z.clamp(max=0)
        sp, sn = zp.sum(-1, keepdim=True), zn.sum(-1, keepdim=True)
        share = alpha * torch.where(sp > 0, zp / sp.clamp(min=1e-12), torch.zeros_like(zp))
        share = share - beta * torch.where(sn < 0, zn / sn.clamp(max=-1e-12), torch.zeros_like(zn))
        rel = (share * rel.unsqueeze(-1)).sum(1)
        expected.append(rel)
    got = lrp_relevances(model, x, target, alpha, beta)
    for g, e in zip(got, expected[::-1]):
        torch.testing.assert_close(g, e.detach(), rtol=1e-4, atol=1e-5)


def test_naive_masks_equal_the_per_class_mean_rule_class_by_class():
    """One pass over all classes gives Eq. 2's masks class by class (mean activation > 0)."""
    torch.manual_seed(3)
    model = MLP(12, [40, 30], 5)
    x = torch.randn(300, 12)
    y = torch.randint(0, 5, (300,))
    classes = np.array([0, 2, 3, 4])
    got = naive_unit_masks(model, x, y, classes)
    acts = model.activations(x)
    for c in classes.tolist():
        want = [(a[y == c].mean(dim=0) > 0).numpy() for a in acts]
        assert all(np.array_equal(g, w) for g, w in zip(got[c], want, strict=True))


def test_a_models_initial_weights_are_those_torch_manual_seed_draws_and_the_global_stream_is_left_alone():
    from p2pfed.learning.model import build_model
    torch.manual_seed(7)
    reference = MLP(6, [16, 8], 3)
    torch.manual_seed(123)
    expected_next = torch.rand(4)
    torch.manual_seed(123)
    built = build_model(6, 3, [16, 8], seed=7)
    assert all(torch.equal(a, b) for a, b in zip(built.state_dict().values(), reference.state_dict().values()))
    assert torch.equal(torch.rand(4), expected_next)
