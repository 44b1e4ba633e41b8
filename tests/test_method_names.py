"""A method's ``name`` and ``message_kind``: named after its class when it sets no name, and a
name that cannot travel on the wire is one line at load time, naming the class attribute."""

from __future__ import annotations

import textwrap

import pytest

from p2pfed.algorithms import algorithm_class
from p2pfed.algorithms.naming import default_name
from p2pfed.cli.main import main
from p2pfed.data import make_synthetic
from p2pfed.plugins import PluginError
from p2pfed.testing import ContractError, Federation, check_algorithm, make_algorithms

GOSSIP = """
from p2pfed.algorithms import Algorithm, checked_tensors, model_payload, parameter_shapes


class {cls}(Algorithm):
    {attributes}

    def share(self, round):
        return model_payload(self.ctx.model, self.ctx.num_samples)

    def check(self, payload):
        return checked_tensors(payload, parameter_shapes(self.ctx.model))
"""


def write_method(folder, module: str, cls: str, attributes: str = "pass") -> str:
    (folder / f"{module}.py").write_text(textwrap.dedent(GOSSIP.format(cls=cls, attributes=attributes)))
    return f"{module}.py:{cls}"


def test_a_method_without_a_name_is_named_after_its_class():
    assert default_name("MyFancyMethod") == "my-fancy-method"
    assert default_name("FedAvgHTTP2") == "fed-avg-http2"
    assert default_name("gossip_v2") == "gossip_v2"


def test_a_users_method_without_a_name_runs_under_its_class_name(tmp_path):
    cls = algorithm_class(write_method(tmp_path, "unnamed_gossip", "MyFancyMethod"), [tmp_path])
    assert cls.name == "my-fancy-method" and cls.kind() == "my-fancy-method"
    federation = Federation(make_algorithms(cls, make_synthetic(num_devices=3, seed=0))).run(2)
    assert federation.recorder.messages_dropped == 0 and federation.recorder.bytes_sent_total > 0


def test_a_subclass_without_a_name_keeps_its_parents(tmp_path):
    """A wrapper (an attack's, a user's variant) still speaks its method's kind on the wire."""
    from p2pfed.algorithms.attacks import Attack, adversarial

    cls = algorithm_class(write_method(tmp_path, "parent_gossip", "ParentGossip"), [tmp_path])
    attacked = adversarial(cls, Attack(("free-ride",)), seed=0)
    assert attacked.name == attacked.kind() == "parent-gossip"


@pytest.mark.parametrize(("attribute", "value"), [("name", "My Method"), ("message_kind", "gossip:model"),
                                                  ("name", "x" * 65)])
def test_a_name_the_wire_cannot_carry_is_one_line_at_validate(tmp_path, capsys, attribute, value):
    method = write_method(tmp_path, f"bad_{attribute}_{len(value)}", "BadlyNamed", f"{attribute} = {value!r}")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: s\nrounds: 2\ndataset:\n  name: synthetic\nalgorithm:\n  name: {method}\n")
    assert main(["validate", str(scenario)]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    (line,) = (out + err).strip().splitlines()
    assert f"BadlyNamed.{attribute} = {value!r}" in line and "[a-z0-9/_-]{1,64}" in line, line
    with pytest.raises(PluginError, match=rf"BadlyNamed\.{attribute}"):
        algorithm_class(method, [tmp_path])


def test_the_contract_names_a_bad_name_in_one_line(tmp_path):
    import sys

    write_method(tmp_path, "bad_for_contract", "Spaced", "name = 'spaced out'")
    sys.path.insert(0, str(tmp_path))
    try:
        from bad_for_contract import Spaced
    finally:
        sys.path.remove(str(tmp_path))
    with pytest.raises(ContractError) as err:
        check_algorithm(Spaced)
    assert str(err.value).splitlines()[1:] == [
        "names_valid: Spaced.name = 'spaced out': a method's name must be 1 to 64 of a-z 0-9 / _ - ([a-z0-9/_-]{1,64})"]
