"""``.ci/run`` runs every slow test that guards users: a test moved out of the default suite is not
moved out of CI by accident."""

import re

from tests.conftest import ROOT

# Slow tests .ci/run leaves out, and why.
NOT_IN_CI = {"tests/test_contacts_scale.py": "a timing bench at 10,000 devices, for an idle machine"}


def _ci_slow_files() -> set[str]:
    text = (ROOT / ".ci" / "run").read_text()
    listed = re.search(r"SLOW_FILES=\((.*?)\)", text, re.S)
    assert listed, ".ci/run has no SLOW_FILES=( ... ) list"
    assert '-m slow -n "$(nproc)" "${SLOW_FILES[@]}"' in text
    return set(listed.group(1).split())


def test_every_file_with_slow_tests_is_in_the_ci_slow_set():
    slow = {f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py")
            if re.search(r"^\s*@pytest\.mark\.slow|marks=pytest\.mark\.slow|pytestmark = pytest\.mark\.slow",
                         p.read_text(), re.M)}
    listed = _ci_slow_files()
    assert sorted(slow - listed - set(NOT_IN_CI)) == []
    assert sorted(p for p in listed if not (ROOT / p).exists()) == []
