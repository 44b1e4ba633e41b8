"""Which code made a result: summary.json's ``code`` record and the report's mixed-versions warning."""

import re
import subprocess

import p2pfed
from p2pfed.results.provenance import _git_state, code_version, describe
from p2pfed.sweeps.aggregate import CellResult
from p2pfed.sweeps.report import code_note


def test_code_version_names_the_package_and_the_commit_when_in_git():
    code = code_version()
    assert code["p2pfed"] == p2pfed.__version__
    in_git = subprocess.run(["git", "-C", str(p2pfed.__path__[0]), "rev-parse", "HEAD"],
                            capture_output=True, text=True).returncode == 0
    if in_git:
        assert re.fullmatch(r"[0-9a-f]{40}", code["git_commit"]) and isinstance(code["git_dirty"], bool)
    else:
        assert code["git_commit"] is None and code["git_dirty"] is None


def test_outside_a_checkout_the_git_fields_are_unknown(tmp_path):
    assert _git_state(tmp_path) == {"git_commit": None, "git_dirty": None}
    assert describe(None) == "unknown"
    assert describe({"p2pfed": "0.1.0", "git_commit": None}) == "0.1.0"
    assert describe({"p2pfed": "0.1.0", "git_commit": "a" * 40, "git_dirty": True}) == \
        "0.1.0 @ aaaaaaaa (+ uncommitted changes)"


def _cell(code):
    return CellResult(point=None, status="done", summary={"code": code})


def test_the_report_warns_when_cells_ran_with_different_code():
    one = {"p2pfed": "0.1.0", "git_commit": "a" * 40, "git_dirty": False}
    other = {"p2pfed": "0.1.0", "git_commit": "b" * 40, "git_dirty": False}
    assert code_note([_cell(one), _cell(one), CellResult(point=None, status="failed")]) == ""
    note = code_note([_cell(one), _cell(other), _cell(other)])
    assert "2 versions of the code" in note
    assert "0.1.0 @ aaaaaaaa: 1 cells" in note and "0.1.0 @ bbbbbbbb: 2 cells" in note
    # cells from before the record existed count as their own (unknown) version
    assert "unknown: 1 cells" in code_note([_cell(one), CellResult(point=None, status="done", summary={})])
