"""The reference documentation comes from the code: every field carries a description, the
committed pages are what ``python -m p2pfed.docs_gen`` writes, and ``p2pfed explain`` prints a
field's entry from the schema."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel, Field

from p2pfed.algorithms import ALGORITHMS
from p2pfed.cli.main import main
from p2pfed.docs_gen import PAGES, REGENERATE, generated, stale
from p2pfed.docs_gen.markdown import cell
from p2pfed.peer.config import PeerConfig
from p2pfed.peer.faults import Faults
from p2pfed.scenario.fields import explained, walk
from p2pfed.scenario.schema import Scenario
from p2pfed.sweeps.spec import SweepSpec
from tests.conftest import ROOT

DOCUMENTED = {"scenario": Scenario, "peer file": PeerConfig, "faults file": Faults, "sweep file": SweepSpec,
              **{f"algorithm.{name}": cls.Options for name, cls in ALGORITHMS.items()}}


def undocumented(model: type[BaseModel]) -> list[str]:
    """The dotted paths of the fields, nested sections' included, that have no description."""
    return [doc.path for doc in walk(model) if not doc.description.strip()]


def test_the_description_check_sees_a_nested_field_without_one():
    class Inner(BaseModel):
        told: int = Field(1, description="Says what it is.")
        silent: int = 2

    class Outer(BaseModel):
        entries: list[Inner] = Field([], description="Entries.")
        one: Inner | None = Field(None, description="One, or none.")

    assert undocumented(Outer) == ["entries.silent", "one.silent"]


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_every_field_has_a_description(name):
    missing = undocumented(DOCUMENTED[name])
    assert not missing, f"{name}: fields without a description: {missing}"


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_descriptions_name_no_issue(name):
    found = [doc.path for doc in walk(DOCUMENTED[name]) if re.search(r"\bissue\b|#\d", doc.description, re.I)]
    assert not found, f"{name}: descriptions naming an issue: {found}"


def test_the_committed_pages_are_what_the_code_generates():
    old = stale(ROOT)
    assert not old, f"{', '.join(old)} differ from the code; regenerate with: {REGENERATE}"


def test_the_staleness_check_sees_an_edited_page(tmp_path):
    for path, text in generated().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    assert stale(tmp_path) == []
    edited = tmp_path / "docs/reference/cli.md"
    edited.write_text(edited.read_text() + "hand edit\n")
    assert stale(tmp_path) == ["docs/reference/cli.md"]


def test_the_scenario_page_documents_every_section_and_method():
    page = generated()["docs/reference/scenario.md"]
    sections = [doc.path for doc in walk(Scenario) if doc.section is not None]
    assert sections and all(f"`{path}`\n" in page for path in sections)
    assert all(f"### `{name}`\n" in page for name in ALGORITHMS)
    description = Scenario.model_fields["contacts"].annotation.model_fields["protocol"].description
    assert cell(description) in page


def test_the_cli_page_lists_every_command_and_option():
    from p2pfed.cli.main import build_parser
    from p2pfed.docs_gen.cli_page import commands

    page = generated()["docs/reference/cli.md"]
    for name, _, parser in commands(build_parser()):
        assert f"## `p2pfed {name}`" in page
        options = [opt for a in parser._actions for opt in a.option_strings if opt not in ("-h", "--help")]
        assert all(f"`{opt}" in page for opt in options), name


def test_generated_tables_keep_their_columns():
    """A pipe in a description is escaped: every row has its header's number of cells."""
    for path, text in generated().items():
        width = None
        for line in text.splitlines():
            if not line.startswith("|"):
                width = None
                continue
            cells = len(re.split(r"(?<!\\)\|", line)) - 2
            width = width or cells
            assert cells == width, f"{path}: {line[:80]}"


def slug(heading: str) -> str:
    """An anchor as MkDocs' table of contents and GitHub agree on it for these headings."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"\s", "-", text)


def test_links_are_relative_and_land():
    pages = generated()
    for path, text in pages.items():
        folder = path.rsplit("/", 1)[0]
        for target in re.findall(r"\]\(([^)]+)\)", text):
            file, _, anchor = target.partition("#")
            assert "://" not in file and not file.startswith("/"), f"{path}: {target}"
            linked = pages[f"{folder}/{file}"] if file else text
            headings = [slug(h) for h in re.findall(r"^#+ (.*)$", linked, flags=re.M)]
            assert not anchor or anchor in headings, f"{path}: {target}"


def test_explain_prints_a_fields_entry(capsys):
    assert main(["explain", "contacts.protocol"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("contacts.protocol\n")
    assert "allowed: ideal, acknowledged" in out and "default: ideal" in out
    assert " ".join(out.split()[-4:]) == " ".join(explained("contacts.protocol")[0].description.split()[-4:])


def test_explain_prints_a_methods_option_and_one_shared_by_many(capsys):
    assert main(["explain", "algorithm.fedsub.extraction"]) == 0
    assert "default: naive" in capsys.readouterr().out
    assert main(["explain", "algorithm.robust"]) == 0
    out = capsys.readouterr().out
    assert out.count("algorithm.robust (") == 1 and "fedsub" in out and "gossip-avg" in out
    assert [d.path for d in explained("algorithm.lam")] == ["algorithm.lam (ditto)", "algorithm.lam (fedpews)",
                                                           "algorithm.lam (safl)"]


def test_explain_a_section_lists_its_fields():
    assert [d.path for d in explained("churn")] == ["churn", "churn.mean_online_s", "churn.mean_offline_s"]


def test_explain_an_unknown_field_is_one_line_with_close_matches(capsys):
    assert main(["explain", "contacts.protcol"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "'contacts.protcol'" in err and "did you mean contacts.protocol" in err


def test_the_generator_writes_every_page(tmp_path, capsys):
    from p2pfed.docs_gen.__main__ import main as generate

    assert generate(["--root", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert all(f"{path}: out of date" in err for path in PAGES)
    assert generate(["--root", str(tmp_path)]) == 0
    assert generate(["--root", str(tmp_path), "--check"]) == 0


def test_the_hosts_file_example_is_read_as_shown(tmp_path):
    from p2pfed.peer.bundle import read_hosts

    (block,) = re.findall(r"^```yaml\n(.*?)^```", generated()["docs/reference/scenario.md"], flags=re.M | re.S)
    (tmp_path / "hosts.yaml").write_text(block)
    assert read_hosts(tmp_path / "hosts.yaml", 3) == ["tcp://192.168.1.10:5555", "tcp://192.168.1.11:6000",
                                                     "tcp://192.168.1.12:6001"]
