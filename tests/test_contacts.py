"""Contact sources: random waypoint, Poisson, trace files (with line-numbered errors), node mapping."""

import gzip
import math

import networkx as nx
import numpy as np
import pytest

from p2pfed.network.contacts import (ContactError, ContactPlan, make_contact, map_nodes, poisson_contacts,
                                    random_waypoint_contacts, read_trace, static_contacts,
                                    waypoint_positions)

RWP = dict(area_m=(200.0, 200.0), speed_mps=(1.0, 2.0), pause_s=(0.0, 30.0), step_s=1.0,
           bandwidth_bps=1e6, latency_s=0.0)


def test_random_waypoint_with_range_zero_has_no_contacts():
    assert random_waypoint_contacts(10, 600.0, range_m=0.0, rng=np.random.default_rng(0), **RWP) == []


def test_random_waypoint_range_covering_the_area_is_one_contact_per_pair_all_along():
    contacts = random_waypoint_contacts(5, 300.0, range_m=1000.0, rng=np.random.default_rng(0), **RWP)
    assert len(contacts) == 10 and all((c.start, c.end) == (0.0, 300.0) for c in contacts)


def test_random_waypoint_contacts_match_the_positions():
    rng_seed = 3
    contacts = random_waypoint_contacts(6, 900.0, range_m=40.0, rng=np.random.default_rng(rng_seed), **RWP)
    pos = waypoint_positions(6, 900.0, area_m=RWP["area_m"], speed_mps=RWP["speed_mps"],
                             pause_s=RWP["pause_s"], step_s=1.0, rng=np.random.default_rng(rng_seed))
    assert contacts
    assert np.all((pos >= 0) & (pos <= 200.0))
    speeds = np.linalg.norm(np.diff(pos, axis=0), axis=-1)
    assert speeds.max() <= 2.0 + 1e-9
    plan = ContactPlan(6, contacts)
    for t in (0, 100, 450, 899):
        close = {(a, b) for a in range(6) for b in range(a + 1, 6)
                 if np.linalg.norm(pos[t, a] - pos[t, b]) < 40.0}
        assert set(plan.snapshot(float(t)).edges) == close


def test_poisson_contact_rate_matches_the_mean_intercontact_time():
    rng = np.random.default_rng(0)
    contacts = poisson_contacts(20, 36_000.0, mean_intercontact_s=600.0, mean_duration_s=60.0,
                                bandwidth_bps=1e6, latency_s=0.0, rng=rng)
    expected = 190 * 36_000.0 / (600.0 + 60.0)
    assert abs(len(contacts) / expected - 1) < 0.05
    assert abs(np.mean([c.duration for c in contacts]) / 60.0 - 1) < 0.05
    assert all(0 <= c.start < c.end <= 36_000.0 for c in contacts)


def test_poisson_power_law_gaps_keep_the_mean_but_have_a_heavy_tail():
    kw = dict(mean_intercontact_s=600.0, mean_duration_s=1.0, bandwidth_bps=1e6, latency_s=0.0)
    expo = poisson_contacts(12, 200_000.0, rng=np.random.default_rng(1), **kw)
    pareto = poisson_contacts(12, 200_000.0, rng=np.random.default_rng(1), intercontact="power-law",
                              alpha=2.5, **kw)

    def gaps(cs):
        by_pair = {}
        for c in cs:
            by_pair.setdefault((c.a, c.b), []).append(c)
        return np.concatenate([[b.start - a.end for a, b in zip(v, v[1:])] for v in by_pair.values()])

    ge, gp = gaps(expo), gaps(pareto)
    assert abs(ge.mean() / 600 - 1) < 0.1 and abs(gp.mean() / 600 - 1) < 0.1
    assert gp.min() >= 600 * 1.5 / 2.5 - 1e-9              # Pareto minimum x_m
    assert np.quantile(gp, 0.999) / gp.mean() > np.quantile(ge, 0.999) / ge.mean() * 0.9
    with pytest.raises(ContactError, match="power_law_alpha"):
        poisson_contacts(2, 10.0, rng=np.random.default_rng(0), intercontact="power-law", alpha=1.0, **kw)


def test_static_graph_is_contacts_that_never_end():
    g = nx.cycle_graph(4)
    nx.set_edge_attributes(g, 1e6, "bandwidth_bps")
    nx.set_edge_attributes(g, 0.01, "latency_s")
    plan = ContactPlan(4, static_contacts(g))
    assert all(c.end == math.inf for c in plan.contacts)
    assert set(plan.snapshot(1e9).edges) == set(g.edges)
    assert plan.neighbours(0, 5.0) == [1, 3]


def test_snapshot_is_half_open():
    plan = ContactPlan(3, [make_contact(2, 0, 10.0, 20.0, 1e6, 0.0)])
    assert [set(plan.snapshot(t).edges) for t in (9.9, 10.0, 19.9, 20.0)] == [set(), {(0, 2)}, {(0, 2)}, set()]
    assert plan.snapshot(0).number_of_nodes() == 3


def test_example_traces_of_both_formats_agree(repo_root):
    one = read_trace(repo_root / "topologies" / "example-one.txt", "one")
    interval = read_trace(repo_root / "topologies" / "example-interval.txt", "interval")
    assert sorted(one, key=lambda c: (c.start, c.a)) == sorted(interval, key=lambda c: (c.start, c.a))
    assert len(one) == 7


@pytest.mark.parametrize("fmt, text, line, message", [
    ("one", "0 CONN 1 2 up\n# fine\n\n5 CONN 1 2 sideways\n", 4, "expected '<time> CONN"),
    ("one", "0 CONN 1 2 up\n3 CONN 2 3 down\n", 2, "not up"),
    ("one", "10 CONN 1 2 up\n3 CONN 1 2 down\n", 2, "goes back"),
    ("one", "x CONN 1 2 up\n", 1, "time must be a number"),
    ("interval", "a b 0 10\na b 5\n", 2, "expected '<a> <b> <start> <end>'"),
    ("interval", "a b 0 10\n\na b 20 15\n", 3, "not after start"),
    ("interval", "a a 0 10\n", 1, "two distinct ids"),
    ("interval", "a b -1 10\n", 1, "start must be a finite number >= 0"),
    ("sociopatterns", "20 1 2\n40 1 2 3\n", 2, "expected 't i j'"),
    ("sociopatterns", "20 1 2\n20 2 1\n", 2, "duplicate line"),
])
def test_bad_trace_lines_name_file_and_line(tmp_path, fmt, text, line, message):
    f = tmp_path / "trace.txt"
    f.write_text(text)
    with pytest.raises(ContactError) as err:
        read_trace(f, fmt)
    assert str(err.value).startswith(f"{f}:{line}: ") and message in str(err.value)


def test_missing_trace_file_is_named(tmp_path):
    with pytest.raises(ContactError, match="trace file not found"):
        read_trace(tmp_path / "nope.txt", "one")


def test_one_format_closes_open_links_at_the_end_and_merges_repeated_ups(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("0 CONN a b up\n5 CONN a b up\n8 CONN b c up\n20 CONN a b down\n30 CONN c d up\n40 CONN c d down\n")
    got = {(c.a, c.b): (c.start, c.end) for c in read_trace(f, "one")}
    assert got == {("a", "b"): (0, 20), ("b", "c"): (8, 40), ("c", "d"): (30, 40)}


def test_node_mapping_rules(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("10 2 0 5\n10 7 5 9\n2 7 9 12\n7 30 12 20\n")
    cs = read_trace(f, "interval")
    assert map_nodes(cs, 4, "sorted") == {"2": 0, "7": 1, "10": 2, "30": 3}
    # contacts per id: 7 → 3, 2 → 2, 10 → 2, 30 → 1; the tie between 2 and 10 goes to the lower id
    assert map_nodes(cs, 2, "most-active") == {"2": 0, "7": 1}
    assert map_nodes(cs, 2, [30, "2"], allow_mismatch=False) == {"30": 0, "2": 1}
    with pytest.raises(ContactError, match="has 4 ids but the scenario has 6 devices"):
        map_nodes(cs, 6, "most-active")
    with pytest.raises(ContactError, match="most-active"):
        map_nodes(cs, 3, "sorted")
    assert map_nodes(cs, 6, "sorted", allow_mismatch=True) == {"2": 0, "7": 1, "10": 2, "30": 3}
    assert map_nodes(cs, 3, "sorted", allow_mismatch=True) == {"2": 0, "7": 1, "10": 2}
    with pytest.raises(ContactError, match="not in the trace: 99"):
        map_nodes(cs, 2, [99, 2])


def test_sociopatterns_importer_matches_the_readme_facts(repo_root):
    path = repo_root / "topologies" / "sociopatterns" / "workplace_InVS15_tij.dat.gz"
    with gzip.open(path, "rt") as fh:
        lines = fh.read().splitlines()
    assert len(lines) == 78_249 and len(set(lines)) == 78_249
    times = [int(line.split()[0]) for line in lines]
    assert (min(times), max(times)) == (28_840, 1_022_380)
    contacts = read_trace(path, "sociopatterns")
    durations = np.array([c.end - c.start for c in contacts])
    assert len({c.a for c in contacts} | {c.b for c in contacts}) == 217
    assert len({(c.a, c.b) for c in contacts}) == 4_274
    assert len(contacts) == 33_751
    assert round(durations.mean(), 1) == 46.4 and np.median(durations) == 20 and durations.max() == 13_020
    top = map_nodes(contacts, 36, "most-active")
    assert sum((c.a in top) + (c.b in top) for c in contacts) == 23_101
