"""docs/writing-a-method.md: every python snippet runs as written, in order, as one file, and
imports p2pfed's method interface from one public module."""

from __future__ import annotations

import re
import runpy

import pytest

from p2pfed.algorithms import Algorithm
from p2pfed.data import make_synthetic
from p2pfed.testing import Federation, make_algorithms
from tests.conftest import ROOT

PAGE = ROOT / "docs" / "writing-a-method.md"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def page_code() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.M | re.S)
    assert len(blocks) >= 6
    return "\n\n".join(blocks)


def test_the_page_imports_the_method_interface_from_one_module():
    modules = set(re.findall(r"^from (p2pfed[\w.]*) import", page_code(), flags=re.M))
    assert modules == {"p2pfed.algorithms", "p2pfed.testing", "p2pfed.data"}


def test_every_snippet_on_the_method_page_runs_as_written(tmp_path):
    """As a script (``python page.py``): the classes live in ``__main__``, so the contract's
    same-seed check says it compared runs in one process only."""
    (tmp_path / "method_page.py").write_text(page_code())
    with pytest.warns(UserWarning, match="in this process only"):
        page = runpy.run_path(str(tmp_path / "method_page.py"), run_name="__main__")   # the contract's too
    methods = [v for v in page.values() if isinstance(v, type) and issubclass(v, Algorithm) and v is not Algorithm]
    assert {m.__name__ for m in methods} == {"MyMethod", "Proximal", "Average", "NormWeighted", "Tracked", "WarmedUp",
                                                "Remembering", "Lean"}
    for method in methods:
        federation = Federation(make_algorithms(method, make_synthetic(num_devices=3, seed=0))).run(3, evaluate=True)
        assert federation.recorder.messages_dropped == 0, method.__name__
    assert page["MyMethod"].name == "my-method" and page["WarmedUp"].name == "warmed-up"
