"""The units of a model: what class subnetworks, pruning and masks keep or drop.

A dense layer's unit is one output neuron (its weight row and bias); a convolution's unit is one
output **channel** (its filter, its bias and its batch norm's scale and shift) — the unit FedSub's
subnetworks, SAFL's Network-Slimming pruning and FedPeWS's masks need on a CNN. A method that
works on units reads them through this module, the same for every model that has them:

- ``unit_layers(model)``: per layer, its number of units and the parameters whose first
  dimension runs over them (so "keep unit j" is "keep row j of each of those parameters"); it is
  worked out once per model and read again only when the model's parameters (names or shapes)
  change, since methods ask for it for every message and every fusion;
- ``unit_activations(model, x)``: per layer, each sample's activation of each unit (a channel's
  is its mean over positions), the last layer's being the logits.

Batch norm's running statistics are buffers, not unit parameters: each device keeps its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import nn
from torch.nn.modules import module as torch_module


UNIT_MODELS = ("mlp", "cnn")   # the built-in models with units (``model.name``)


@dataclass(frozen=True)
class UnitLayer:
    """One layer's units: how many, and the parameters (by ``named_parameters`` name) whose rows
    are those units, with each parameter's shape after its first dimension."""

    size: int
    params: tuple[str, ...]
    row_shapes: tuple[tuple[int, ...], ...]

    @property
    def row_width(self) -> int:
        """Values one unit holds across its parameters (a dense unit: inputs + 1)."""
        return sum(math.prod(shape) for shape in self.row_shapes)


@runtime_checkable
class UnitModel(Protocol):
    """A model whose layers have units (the MLP, the CNN)."""

    def unit_layer_params(self) -> list[tuple[str, ...]]:
        """Per layer, the names of the parameters whose rows are its units."""

    def unit_activations(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Per layer, (samples, units) activations; the last layer's are the logits."""


def has_units(model: nn.Module) -> bool:
    return isinstance(model, UnitModel)


_LAYOUT = "_p2pfed_unit_layout"   # the model's own slot for its worked-out layout
_registrations = 0   # parameters and submodules registered on any module since import


def _count_registration(*_: object) -> None:
    """torch's global registration hook: any model's structure may have changed."""
    global _registrations
    _registrations += 1


torch_module.register_module_parameter_registration_hook(_count_registration)
torch_module.register_module_module_registration_hook(_count_registration)


def unit_layers(model: nn.Module) -> list[UnitLayer]:
    """Every layer's units, in order (the last is the classifier, one unit per class).

    The layout is kept on the model with the names and shapes of its parameters. Those are read
    again only once a parameter or a submodule has been registered on some model since (torch's
    global registration hooks: a parameter replaced by one of another shape, a layer added), and
    the layout worked out again when they differ. A shape changed in place (``param.data = …``)
    is not seen: replace the parameter."""
    registrations = _registrations   # read first: a registration during the check below re-checks next time
    kept = model.__dict__.get(_LAYOUT)
    if kept is not None and kept[0] == registrations:
        return list(kept[2])
    parameters = tuple((name, p.shape) for name, p in model.named_parameters())
    if kept is not None and kept[1] == parameters:
        layers = list(kept[2])
    else:
        layers = _work_out_unit_layers(model)
    model.__dict__[_LAYOUT] = (registrations, parameters, tuple(layers))
    return layers


def _work_out_unit_layers(model: nn.Module) -> list[UnitLayer]:
    if not isinstance(model, UnitModel):
        raise TypeError(f"{type(model).__name__} has no units (it defines no unit_layer_params)")
    out = []
    for names in model.unit_layer_params():
        shapes = [tuple(model.get_parameter(n).shape) for n in names]   # by path: no walk of every module
        if len({s[0] for s in shapes}) != 1:
            raise ValueError(f"parameters {names} do not share their first dimension (the units): {shapes}")
        out.append(UnitLayer(shapes[0][0], tuple(names), tuple(s[1:] for s in shapes)))
    return out


def unit_activations(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    if not isinstance(model, UnitModel):
        raise TypeError(f"{type(model).__name__} has no units (it defines no unit_activations)")
    return model.unit_activations(x)
