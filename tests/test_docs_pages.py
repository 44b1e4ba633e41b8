"""The documentation pages: every tutorial's and how-to's code runs as written, in order, in an
empty folder (``tests/doc_blocks.py`` says how each kind of block is run), and every ``p2pfed``
command on any page parses.

What is not executed here, and where it is: the pages with real peers on loopback and with Dask
sweeps run in the slow set (``-m slow``, which ``.ci/run`` runs: tens of seconds each, peer and
worker processes starting); in the default run their commands are only parsed (the last test). Blocks marked ``<!-- test: parse ... -->`` (root namespaces, real hosts, long runs on the
full-size scenarios) are parsed, their comment naming the test that runs them where one does.
``docs/writing-a-method.md`` is run by ``tests/test_method_page.py``; the site itself is built
by ``mkdocs build --strict`` in ``.ci/run``.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import ROOT
from tests.doc_blocks import PageRun, blocks, commands, p2pfed_argv, prepare

DOCS = ROOT / "docs"
# Pages whose commands start peer processes or Dask workers (tens of seconds): run in the slow set.
SLOW = {"tutorials/real-peers.md": "launch", "tutorials/sweeps.md": "sweep"}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def nav_pages() -> list[str]:
    """Every page in mkdocs.yml's nav (its tags, e.g. ``!!python/name:``, read as plain text)."""
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)   # noqa: S506 - SafeLoader subclass
    pages: list[str] = []

    def walk(entry: object) -> None:
        if isinstance(entry, str):
            pages.append(entry)
        elif isinstance(entry, dict):
            for value in entry.values():
                walk(value)
        elif isinstance(entry, list):
            for value in entry:
                walk(value)

    walk(config["nav"])
    return pages


EXECUTED = [p for p in nav_pages() if p.startswith(("tutorials/", "how-to/", "explanation/"))]


@pytest.mark.parametrize("page", [p for p in EXECUTED if p not in SLOW])
def test_every_block_of_the_page_runs_as_written(page, tmp_path):
    prepare(tmp_path)
    PageRun(DOCS / page, tmp_path).run()


@pytest.mark.slow   # peer processes and Dask workers; in the slow set .ci/run runs
@pytest.mark.parametrize("page", sorted(SLOW))
def test_a_slow_pages_blocks_run_as_written(page, tmp_path):
    prepare(tmp_path)
    done = PageRun(DOCS / page, tmp_path).run()
    assert any(argv[0] == SLOW[page] for argv in done.ran)


def test_every_tutorial_and_how_to_in_the_nav_has_code_that_a_test_runs():
    tutorials = [p for p in EXECUTED if p.startswith(("tutorials/", "how-to/"))]
    assert len([p for p in tutorials if p.startswith("tutorials/")]) >= 7
    for page in tutorials:
        assert any(b.mode == "run" and b.lang in ("bash", "python") for b in blocks(DOCS / page)), page


def test_every_p2pfed_command_on_every_page_parses():
    """Including the pages no test executes (a renamed option breaks the docs here first)."""
    from p2pfed.cli.main import build_parser

    pages = [DOCS / p for p in nav_pages() if (DOCS / p).is_file()] + [ROOT / "README.md"]
    seen = 0
    for page in pages:
        for block in blocks(page):
            if block.lang != "bash":
                continue
            for command in commands(block.code):
                argv = p2pfed_argv(command)
                if argv is not None:
                    build_parser().parse_args(argv)
                    seen += 1
    assert seen >= 40


def test_a_page_that_promises_an_exit_code_gets_it_and_a_wrong_one_fails(tmp_path):
    """The runner itself: a command's stated exit status is checked, a missing results file is caught."""
    page = tmp_path / "page.md"
    page.write_text("```bash\np2pfed validate scenarios/broken.yaml   # exit code 2\n```\n")
    prepare(tmp_path)
    PageRun(page, tmp_path).run()
    page.write_text("```bash\np2pfed validate scenarios/broken.yaml\n```\n")
    with pytest.raises(AssertionError, match="broken.yaml"):
        PageRun(page, tmp_path).run()


def test_no_page_written_for_users_cites_an_issue_number():
    for page in [DOCS / p for p in [*EXECUTED, "index.md"]] + [ROOT / "README.md"]:
        assert not re.search(r"\bissue \d+|#\d{2,}\b", page.read_text(), flags=re.I), page
