"""A model's unit layout: worked out once, and again whenever its parameters change."""

import copy

import pytest
import torch
from torch import nn

from p2pfed.learning.cnn import make_cnn
from p2pfed.learning.model import MLP
from p2pfed.learning.units import unit_layers


def _fresh(model: nn.Module):
    """The layout as a model without a kept one gives it."""
    twin = copy.deepcopy(model)
    twin.__dict__.pop("_p2pfed_unit_layout", None)
    return unit_layers(twin)


def test_a_models_layout_is_kept_and_equals_one_worked_out_afresh():
    model = make_cnn(64, 10, torch.Generator(), shape=[1, 8, 8], channels=[4, 8])
    first = unit_layers(model)
    assert [layer.size for layer in first] == [4, 8, 10]
    first.pop()                                    # a caller's list is its own
    assert unit_layers(model) == _fresh(model) and len(unit_layers(model)) == 3
    assert unit_layers(copy.deepcopy(model)) == unit_layers(model)


def test_a_parameter_replaced_by_one_of_another_shape_changes_the_layout():
    model = MLP(5, [6, 7], 3)
    assert [layer.size for layer in unit_layers(model)] == [6, 7, 3]
    with torch.no_grad():
        model.layers[1].weight = nn.Parameter(torch.zeros(9, 6))   # 9 units now, bias still 7: refused
    with pytest.raises(ValueError, match="layers.1.weight"):
        unit_layers(model)
    with torch.no_grad():
        model.layers[1].bias = nn.Parameter(torch.zeros(9))
    layers = unit_layers(model)
    assert [layer.size for layer in layers] == [6, 9, 3] and layers == _fresh(model)


def test_a_model_without_units_is_refused_by_name():
    with pytest.raises(TypeError, match="Sequential has no units"):
        unit_layers(nn.Sequential(nn.Linear(3, 2)))


def test_a_layer_added_changes_the_layout_and_a_kept_one_is_not_walked_again(monkeypatch):
    model = MLP(5, [6, 7], 3)
    assert [layer.size for layer in unit_layers(model)] == [6, 7, 3]
    walks = []
    real = nn.Module.named_parameters
    monkeypatch.setattr(nn.Module, "named_parameters", lambda self, *a, **k: walks.append(1) or real(self, *a, **k))
    unit_layers(model)
    assert walks == []                             # nothing registered since: the kept layout, unread
    model.layers.append(nn.Linear(3, 4))           # a layer registered: read again
    layers = unit_layers(model)
    assert [layer.size for layer in layers] == [6, 7, 3, 4] and layers == _fresh(model) and walks
