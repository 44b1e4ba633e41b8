"""The documentation pages: every tutorial's and how-to's code runs as written, in order, in an
empty folder (``tests/doc_blocks.py`` says how each kind of block is run), and every ``p2pfed``
command on any page parses.

What is not executed here, and where it is: the pages with real peers on loopback and with Dask
sweeps run in the slow set (``-m slow``, which ``.ci/run`` runs: tens of seconds each, peer and
worker processes starting); in the default run their commands are only parsed. Blocks marked
``<!-- test: parse ... -->`` (root namespaces, real hosts, long runs on the full-size scenarios)
are parsed, their comment naming the test that runs them where one does.
``docs/writing-a-method.md`` is run by ``tests/test_method_page.py``. The site is built with
``mkdocs build --strict`` in the slow set, which ``.ci/run`` runs (skipped where the ``docs`` extra
is not installed).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT
from tests import doc_blocks
from tests.doc_blocks import PageRun, blocks, commands, p2pfed_argv, prepare

DOCS = ROOT / "docs"
# Pages whose commands start peer processes or Dask workers (tens of seconds): run in the slow set.
SLOW = {"tutorials/real-peers.md": "launch", "tutorials/sweeps.md": "sweep", "how-to/sharded-run.md": "run"}

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


def test_the_runner_checks_exit_codes_results_folders_and_reasons(tmp_path, monkeypatch):
    """A command's stated exit status is checked; a results folder it promises must be there; a
    parse-only block must say why; a command needing root cannot be run."""
    page = tmp_path / "page.md"
    prepare(tmp_path)
    page.write_text("```bash\np2pfed validate scenarios/broken.yaml   # exit code 2\n```\n")
    PageRun(page, tmp_path).run()
    page.write_text("```bash\np2pfed validate scenarios/broken.yaml\n```\n")
    with pytest.raises(AssertionError, match="broken.yaml"):
        PageRun(page, tmp_path).run()
    page.write_text("```bash\np2pfed report nowhere --out x   # exit code 2\n```\n")
    with pytest.raises(SystemExit):    # --out is no option of report: the parser refuses it
        PageRun(page, tmp_path).run()
    monkeypatch.setitem(doc_blocks.RESULTS, "keys", "summary.json")   # keys writes no summary
    page.write_text("```bash\np2pfed keys --out made --peers 1\n```\n")
    with pytest.raises(AssertionError, match="no summary.json in --out"):
        PageRun(page, tmp_path).run()
    page.write_text("<!-- test: parse -->\n```bash\np2pfed run\n```\n")
    with pytest.raises(ValueError, match="must say why"):
        PageRun(page, tmp_path).run()
    page.write_text("```bash\nsudo p2pfed launch --network emulated\n```\n")
    with pytest.raises(AssertionError, match="root"):
        PageRun(page, tmp_path).run()


def test_no_page_written_for_users_cites_an_issue_number():
    for page in [DOCS / p for p in [*EXECUTED, "index.md"]] + [ROOT / "README.md"]:
        assert not re.search(r"\bissue \d+|#\d{2,}\b", page.read_text(), flags=re.I), page


@pytest.mark.slow   # in the slow set .ci/run runs
def test_the_site_builds_without_a_warning(tmp_path):
    """Strict: a broken link, a page missing from the nav's files or a docstring mkdocstrings
    cannot render fails the build (no --quiet: it hides the warnings strict mode counts)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "api" / "index.html").read_text().count("p2pfed.api.run") > 0
