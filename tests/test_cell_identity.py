"""A sweep cell's identity: the scenario's canonical form, stable when the schema grows."""

from __future__ import annotations

import hashlib
import json
import shutil

from p2pfed.scenario.canonical import canonical
from p2pfed.scenario.loader import dump, load_scenario
from p2pfed.sweeps import store
from p2pfed.sweeps.cells import CellSpec, Point, cell_id, expand
from p2pfed.sweeps.compat import adopt_older_cells
from p2pfed.sweeps.spec import read_sweep
from tests.conftest import ROOT
from tests.test_sweep import write_sweep

SMALL = ROOT / "scenarios" / "synthetic-small.yaml"
ATTACKED = ["adversaries=[{kind: sign-flip, fraction: 0.25}]"]


def _without(data: dict, *path: str | int) -> dict:
    """A deep copy of ``data`` as a run written before the field at ``path`` existed."""
    data = json.loads(json.dumps(data))
    node = data
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return data


def test_a_field_at_its_default_leaves_the_identity_unchanged():
    loaded = load_scenario(SMALL, ATTACKED)
    resolved, method = dump(loaded), loaded.method
    form = canonical(resolved, method)
    # A field of a section, of an entry of a list of sections, and a method's option: each joins at its default.
    for path in [("topology", "latency_s"), ("adversaries", 0, "start_round"), ("algorithm", "min_cluster_size")]:
        assert canonical(_without(resolved, *path), method) == form
    assert "topology" not in form or "latency_s" not in form["topology"]
    given = load_scenario(SMALL, [*ATTACKED, f"topology.latency_s={loaded.scenario.topology.latency_s}",
                                  "contacts.protocol=ideal"])
    assert cell_id(given) == cell_id(loaded)


def test_a_value_other_than_the_default_changes_the_identity():
    loaded = load_scenario(SMALL, ATTACKED)
    for change in ["topology.latency_s=0.5", "adversaries=[{kind: sign-flip, fraction: 0.25, start_round: 2}]",
                   "algorithm.min_cluster_size=3"]:
        assert cell_id(load_scenario(SMALL, [*ATTACKED, change])) != cell_id(loaded)


def _older_folder(tmp_path, points, config_of):
    """A sweep folder as an older p2pfed wrote it: other keys, each cell's summary.json config."""
    out = tmp_path / "out"
    ids = [hashlib.sha256(bytes([i])).hexdigest() for i in range(len(points))]
    older = [Point(p.method, p.seed, p.values, CellSpec.from_dict({**p.cell.to_dict(), "id": old_id}))
             for p, old_id in zip(points, ids)]
    store.write_manifest(out, "tiny", "tiny.yaml", ["training.lr"], older)
    for new, old in zip(points, older):
        store.cell_dir(out, old.cell).mkdir(parents=True)
        (store.cell_dir(out, old.cell) / "summary.json").write_text(json.dumps({"config": config_of(new)}))
    return out


def test_resume_keeps_an_older_folders_cells_that_ran_the_same_scenario(tmp_path):
    from p2pfed.sweeps.cells import resolve

    points = expand(read_sweep(write_sweep(tmp_path, seeds=[1])))

    def older_config(point):   # the resolved scenario, before topology.latency_s existed
        c = point.cell
        return _without(dump(resolve(c.scenario, c.method, c.seed, c.overrides)), "topology", "latency_s")

    out = _older_folder(tmp_path, points, older_config)
    assert adopt_older_cells(out, points) == (len(points), 0)
    assert all(store.is_done(out, p.cell) for p in points)


def test_resume_runs_again_an_older_cell_of_another_scenario(tmp_path):
    from p2pfed.sweeps.cells import resolve

    points = expand(read_sweep(write_sweep(tmp_path, seeds=[1])))

    def edited_base(point):   # the base scenario was edited since: another number of epochs
        c = point.cell
        data = dump(resolve(c.scenario, c.method, c.seed, c.overrides))
        data["training"]["epochs"] += 1
        return data

    out = _older_folder(tmp_path, points, edited_base)
    assert adopt_older_cells(out, points) == (0, len(points))
    assert not any(store.is_done(out, p.cell) for p in points)


def test_committed_sweep_folders_resume_under_the_new_keys(tmp_path):
    """The committed cells of a sweep written with earlier keys (kept in the folder's archive) are
    found again by ``--resume``, which writes the archive's cells back into folders first."""
    from p2pfed.sweeps.archive import unpack

    folder = tmp_path / "wisdm-static-fusion"
    shutil.copytree(ROOT / "bench" / "results" / "wisdm-static-fusion", folder)
    points = expand(read_sweep(ROOT / "sweeps" / "wisdm-static-fusion.yaml"))
    assert unpack(folder) == 15
    adopt_older_cells(folder, points)
    assert len(points) == 15 and all(store.is_done(folder, p.cell) for p in points)
