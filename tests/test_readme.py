"""README.md: short (the rest is in docs/), and its example, scenario and commands run as written
(the two set-up commands are only parsed: .ci/run runs them in a fresh virtualenv)."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tests.doc_blocks import PageRun, blocks, prepare

README = ROOT / "README.md"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_readme_is_at_most_150_lines():
    assert len(README.read_text().splitlines()) <= 150


def test_the_readme_has_its_two_commands_a_python_example_a_scenario_and_a_picture():
    found = blocks(README)
    setup = [b.code.strip() for b in found if b.mode == "parse" and b.lang == "bash"]
    assert setup == [
        "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && .venv/bin/pip install -e . "
        "&& .venv/bin/p2pfed run",
        "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && .venv/bin/pip install -e '.[test]' "
        "&& .venv/bin/python -m pytest"]
    python = [b for b in found if b.lang == "python" and b.mode == "run"]
    assert len(python) == 1 and len(python[0].code.splitlines()) <= 10
    scenario = [b for b in found if b.lang == "yaml" and b.title]
    assert len(scenario) == 1 and len(scenario[0].code.splitlines()) <= 5
    assert any(b.lang == "mermaid" for b in found)


def test_the_readme_python_example_scenario_and_commands_run_as_written(tmp_path):
    prepare(tmp_path)
    done = PageRun(README, tmp_path).run()
    assert [argv[0] for argv in done.ran] == ["validate", "run", "compare"]
    assert (tmp_path / "runs" / "my-first" / "rounds.csv").is_file()


def test_every_docs_page_the_readme_links_to_exists():
    import re

    links = re.findall(r"\]\(((?:docs/)?[\w./-]+\.(?:md|cff))\)", README.read_text())
    assert len(links) >= 25
    for link in links:
        assert (ROOT / link).is_file(), link
