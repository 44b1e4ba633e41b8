"""The classifier every device trains: the project's ReLU MLP, or a model of the user's own.

``model.name: mlp`` (the default) is a plain ReLU MLP whose layers are listed in order.

FedSub's subnetworks, prototypes and relevance propagation all walk the layers one by one,
so the model exposes them as an ordered list of ``nn.Linear`` instead of hiding them in a
``Sequential`` with interleaved activations.

Optionally every hidden unit carries a scaling factor (a *unit gate*) that multiplies its ReLU
output: the per-channel factors Network Slimming ranks to prune (SAFL Sec. III-B4 uses the BN
weights of a CNN; an MLP has no channels, so one learnable factor per unit plays that part).
Gates start at 1, so adding them leaves the function unchanged; a gate of 0 removes the unit,
and because it multiplies the ReLU output (not its input) a gate at 0 still gets a gradient,
so a pruned unit can come back (SAFL's model recovery).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, overload

import torch
from torch import nn

from p2pfed.plugins import PluginError, entry_point, is_plugin_name, load_object

ENTRY_POINTS = "p2pfed.models"

if TYPE_CHECKING:
    class LinearList(nn.ModuleList):
        """How the type checker sees ``MLP.layers``: a ModuleList of ``nn.Linear`` only."""

        def __iter__(self) -> Iterator[nn.Linear]: ...

        @overload
        def __getitem__(self, idx: slice) -> LinearList: ...

        @overload
        def __getitem__(self, idx: int) -> nn.Linear: ...

        def __getitem__(self, idx: slice | int) -> LinearList | nn.Linear: ...


class MLP(nn.Module):
    """Linear → ReLU → … → Linear. The last hidden activation is the feature space of prototypes."""

    def __init__(self, in_features: int, hidden: Sequence[int], num_classes: int,
                 unit_gates: bool = False) -> None:
        super().__init__()
        sizes = [int(in_features), *[int(h) for h in hidden], int(num_classes)]
        if any(s <= 0 for s in sizes):
            raise ValueError(f"layer sizes must be positive, got {sizes}")
        self.layers = cast("LinearList", nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])))
        self.gates: nn.ParameterList | None = None
        if unit_gates:
            self.add_unit_gates()

    def add_unit_gates(self) -> None:
        """Give every hidden unit a scaling factor of 1 (parameters ``gates.<layer>``); idempotent."""
        if self.gates is None:
            self.gates = nn.ParameterList(nn.Parameter(torch.ones(layer.out_features))
                                          for layer in self.layers[:-1])

    def _hidden(self, i: int, h: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.layers[i](h))
        return h if self.gates is None else h * self.gates[i]

    @property
    def num_classes(self) -> int:
        return self.layers[-1].out_features

    @property
    def head(self) -> nn.Linear:
        """The classifier on the features (the last layer)."""
        return self.layers[-1]

    def activations(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Post-activation output of every layer (ReLU for hidden layers, logits for the last)."""
        outs = []
        h = x
        for i in range(len(self.layers) - 1):
            h = self._hidden(i, h)
            outs.append(h)
        outs.append(self.layers[-1](h))
        return outs

    def unit_layer_params(self) -> list[tuple[str, ...]]:
        """A layer's units are its neurons: rows of its weight and bias (``learning/units.py``)."""
        return [(f"layers.{i}.weight", f"layers.{i}.bias") for i in range(len(self.layers))]

    def unit_activations(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.activations(x)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate-layer representation f(x), the space prototypes live in."""
        h = x
        for i in range(len(self.layers) - 1):
            h = self._hidden(i, h)
        return h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[-1](self.features(x))


def seed_cpu_generator(seed: int) -> None:
    """Seed torch's global CPU generator, the one a run's model initialisation draws from (runs
    train on the CPU). ``torch.manual_seed`` also queues the seed for every accelerator's
    generators and, while none is initialised, records the caller's stack on each call: a cost
    paid once per device model for generators a run never uses."""
    torch.default_generator.manual_seed(int(seed))


def build_model(in_features: int, num_classes: int, hidden: Sequence[int], seed: int,
                unit_gates: bool = False) -> MLP:
    """A freshly initialised MLP whose weights depend only on ``seed`` (gates, if any, start at 1)."""
    gen_state = torch.random.get_rng_state()
    try:
        seed_cpu_generator(seed)
        return MLP(in_features, hidden, num_classes, unit_gates=unit_gates)
    finally:
        torch.random.set_rng_state(gen_state)


def parameters_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached views of the model's parameters by name (writes go through to the model)."""
    return {name: p.detach() for name, p in model.named_parameters()}


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# -- models of the user's own ---------------------------------------------------------------------
ModelFactory = Callable[..., nn.Module]


def model_factory(name: str, search: Sequence[Path] = ()) -> ModelFactory | None:
    """The factory ``model.name`` names: None for ``mlp`` (built by ``build_model``), the
    built-in ``cnn`` (``learning/cnn.py``), else a user's ``module:function`` /
    ``path/to/file.py:function`` or an installed package's ``p2pfed.models`` entry point. It is
    called as ``factory(input_size, num_classes, generator, **model.options)`` and returns a
    ``torch.nn.Module`` mapping (batch, input_size) to (batch, num_classes) logits."""
    if name == "mlp":
        return None
    if name == "cnn":   # built in: p2pfed/learning/cnn.py
        from p2pfed.learning.cnn import make_cnn
        return make_cnn
    found = load_object(name, search, what="model.name") if is_plugin_name(name) else entry_point(ENTRY_POINTS, name)
    if found is None:
        raise PluginError(f"model.name: unknown model {name!r}; use mlp, or name your own factory as "
                          "module:function or path/to/file.py:function")
    if not callable(found):
        raise PluginError(f"model.name: {name!r} is not callable (a factory returning a torch.nn.Module)")
    return found


def build_user_model(factory: ModelFactory, name: str, in_features: int, num_classes: int, seed: int,
                     options: dict[str, Any] | None = None) -> nn.Module:
    """``factory``'s model, its initial weights drawn from ``seed`` on every device alike (the
    generator it is given, and torch's global one while it runs, both seeded), checked to be a
    module whose parameters are float tensors."""
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        seed_cpu_generator(seed)
        try:
            model = factory(in_features, num_classes, generator, **(options or {}))
        except TypeError as exc:
            raise PluginError(f"model.name: {name!r} must accept (input_size, num_classes, generator, "
                              f"**model.options): {exc}") from None
    if not isinstance(model, nn.Module):
        raise PluginError(f"model.name: {name!r} returned {type(model).__name__}, not a torch.nn.Module")
    if not any(True for _ in model.parameters()):
        raise PluginError(f"model.name: {name!r} returned a model without parameters")
    for pname, param in model.named_parameters():
        if not param.is_floating_point():
            raise PluginError(f"model.name: {name!r}: parameter {pname} is {param.dtype}, not a float tensor")
    return model


def head_of(model: nn.Module, model_name: str = "mlp") -> nn.Module:
    """The classifier a body/head method keeps local: the MLP's last layer, or a user model's
    ``head`` submodule."""
    head = getattr(model, "head", None)
    if not isinstance(head, nn.Module):
        raise ValueError(f"model.name: {model_name!r} declares no head: this method needs a submodule named "
                         "`head` (the classifier on the features)")
    return head


def feature_dim(model: nn.Module, model_name: str = "mlp") -> int:
    """The width of ``model.features(x)``, the space prototypes live in: the input width of its
    head, which must then be a ``Linear`` layer, and ``features`` must exist."""
    head = head_of(model, model_name)
    if not callable(getattr(model, "features", None)) or not isinstance(head, nn.Linear):
        raise ValueError(f"model.name: {model_name!r}: this method needs `features(x)` (the representation) "
                         "and a Linear `head` on it")
    return head.in_features
