"""Files written whole or not at all (``p2pfed.atomic``): results, checkpoints, manifests."""

from __future__ import annotations

import pytest

from p2pfed.atomic import atomic_path, write_text_atomically


@pytest.mark.parametrize("durable", [False, True])
def test_a_write_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path, durable):
    path = tmp_path / "summary.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(path, durable=durable) as tmp:
        tmp.write_text("half a fi")
        raise RuntimeError("killed")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


@pytest.mark.parametrize("durable", [False, True])
def test_a_finished_write_replaces_the_file(tmp_path, durable):
    path = tmp_path / "plot.png"
    path.write_text("old")
    with atomic_path(path, durable=durable) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".png" and tmp != path   # e.g. savefig reads the suffix
        tmp.write_bytes(b"new")
    write_text_atomically(tmp_path / "manifest.json", "{}\n")
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "plot.png"]
