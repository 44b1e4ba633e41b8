"""A method declares its options type once, as ``Algorithm``'s parameter: ``Options`` (what a
scenario's ``algorithm:`` keys are validated by) and ``self.options`` follow from it."""

from __future__ import annotations

import pytest
from pydantic import Field, ValidationError

from p2pfed.algorithms import ALGORITHMS, Algorithm, Options
from p2pfed.algorithms.averaging.gossip_avg import GossipAvg, GossipAvgOptions
from p2pfed.data import make_synthetic
from p2pfed.testing import make_algorithms


class TemperatureOptions(Options):
    temperature: float = Field(0.5, gt=0)


class Tempered(Algorithm[TemperatureOptions]):
    pass


class CoolerGossipOptions(GossipAvgOptions):
    cooling: float = 0.9


class CoolerGossip(GossipAvg[CoolerGossipOptions]):
    pass


def test_the_options_type_given_as_parameter_validates_the_scenarios_keys():
    assert Tempered.Options is TemperatureOptions
    (device, *_) = make_algorithms(Tempered, make_synthetic(num_devices=2, seed=0), {"temperature": 2.0})
    assert device.options == TemperatureOptions(temperature=2.0)
    with pytest.raises(ValidationError, match="temperature"):
        make_algorithms(Tempered, make_synthetic(num_devices=2, seed=0), {"temperature": -1})


def test_a_method_built_on_a_shipped_one_brings_its_own_options_and_keeps_the_parents():
    assert CoolerGossip.Options is CoolerGossipOptions and GossipAvg.Options is GossipAvgOptions
    assert set(CoolerGossip.Options.model_fields) == set(GossipAvgOptions.model_fields) | {"cooling"}
    assert CoolerGossip.name == "gossip-avg" and CoolerGossip.kind() == "gossip/model"   # inherited


def test_a_method_without_options_takes_none():
    assert ALGORITHMS["local"].Options is Options
    with pytest.raises(ValidationError, match="extra"):
        Options.model_validate({"temperature": 1})
