"""FedSub as the papers ran it: the K rule that lets clusters have members, prototypes in input
space, and the two-phase exchange (prototypes first, subnetworks only to cluster-mates that ask),
checked in real runs through ``summary.json``; and a run's clusters against the groups planted in
synthetic data."""

import json

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from p2pfed.algorithms.base import Algorithm, Payload, Received
from p2pfed.cli.main import main
from p2pfed.network.contacts import ContactPlan, make_contact
from p2pfed.engine.opportunistic import AsyncSchedule, OpportunisticSimulation
from p2pfed.algorithms.fedsub.clustering import choose_k_by_dbi_many
from p2pfed.data.dataset import FederatedDataset
from p2pfed.engine import runner
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.build import build_algorithms
from p2pfed.scenario.loader import load_scenario
from p2pfed.testing import fuse_once
from tests.conftest import ROOT
from tests.hand_driven import stub_context

SMALL = ["dataset.synthetic.num_devices=8", "dataset.synthetic.samples_per_class=20", "model.hidden=[16,32]",
         "algorithm.kmeans_n_init=2"]


def _blobs(seed: int = 0, per_blob: int = 12, dim: int = 8) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 10, size=(3, dim))
    return np.concatenate([c + rng.normal(0, 1, size=(per_blob, dim)) for c in centres])


def one_sweep(points, **params):
    """The K sweep the package runs, of one point set."""
    return choose_k_by_dbi_many([points], **params)[0]


@pytest.mark.parametrize("seed", range(3))
def test_three_separated_blobs_give_three_clusters_with_the_default_rule(seed):
    points = _blobs(seed)
    sized = one_sweep(points, k_rule="min-size", min_cluster_size=2)
    assert sized.k == 3
    assert sorted(np.bincount(sized.labels)) == [12, 12, 12]
    assert one_sweep(points, k_rule="half").k == 3
    # the journal's literal rule falls for DBI's degenerate optimum: (near-)singletons
    literal = one_sweep(points, k_rule="literal")
    assert literal.k > 12 and sized.literal_k == literal.k


def test_small_sets_stay_one_cluster_under_the_bounded_rules():
    three = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0]])
    assert one_sweep(three, k_rule="min-size", min_cluster_size=2).k == 1   # K=2 has a singleton
    assert one_sweep(three, k_rule="half").k == 1
    assert one_sweep(three, k_rule="literal").k == 2
    four = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
    for rule in ("min-size", "half"):
        assert one_sweep(four, k_rule=rule, min_cluster_size=2).k == 2
    # two clear pairs, yet the literal rule splits one: a singleton's zero scatter lowers the DBI
    assert one_sweep(four, k_rule="literal", min_cluster_size=2).k == 3
    with pytest.raises(ValueError, match="k_rule"):
        one_sweep(four, k_rule="largest")


def _run(repo_root, tmp_path, name, extra, scenario="synthetic-small.yaml"):
    out = tmp_path / name
    args = sum((["--set", s] for s in extra), [])
    assert main(["run", str(repo_root / "scenarios" / scenario), "--out", str(out), "--quiet", *args]) == 0
    return json.loads((out / "summary.json").read_text())


def test_fedsub_fuses_with_cluster_mates_in_a_real_run(repo_root, tmp_path):
    """The mechanism fires: class fusions take a cluster-mate's subnetwork, from clusters that
    the bounded K rule makes (the literal rule's K is reported beside it)."""
    s = _run(repo_root, tmp_path, "default", [*SMALL, "rounds=4"])
    stats = s["algorithm_stats"]
    assert s["config"]["algorithm"]["k_rule"] == "min-size"
    assert s["config"]["algorithm"]["prototypes"] == "input"
    assert stats["fusions_with_mate_fraction"] > 0.5, stats
    # the bounded K rule finds the planted groups (3 per class; of 3, 3 and 2 of the 8 devices):
    # as many clusters, and each device's cluster is its group (the literal rule's K beside it)
    groups = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml",
                                                 [*SMALL, "rounds=4"]).federation.groups
    sizes = [np.count_nonzero(groups[:, c] == groups[d, c]) for d in range(len(groups)) for c in range(groups.shape[1])]
    assert stats["k_mean"] == pytest.approx(np.mean([len(np.unique(g)) for g in groups.T])), stats
    assert stats["cluster_size_mean"] == pytest.approx(np.mean(sizes)), stats
    assert stats["literal_k_mean"] > 0
    # paper-style accounting counts each class's subnetwork apart: more than the union sent once
    assert stats["subnet_message_bytes_paper_style"] > stats["subnet_message_bytes"] > 0


def _run_keeping_devices(overrides: list[str]) -> tuple[dict, list, FederatedDataset]:
    """A run of synthetic-small through ``run_scenario``, with its devices' methods kept to read
    after the run, and its data (the planted groups: ``groups``)."""
    loaded = load_scenario(ROOT / "scenarios" / "synthetic-small.yaml", overrides)
    kept: list = []
    build = runner.build_algorithms
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "build_algorithms", lambda *a, **k: kept.extend(build(*a, **k)) or kept)
        summary = runner.run_scenario(loaded, progress=False)
    return summary, kept, loaded.federation


@pytest.fixture(scope="module")
def planted_runs():
    """synthetic-small as shipped (12 devices, 4 classes, 3 planted groups of 4 per class, drawn
    per class) under FedSub, under FedSub with every device in one cluster (no K >= 2 partition
    has clusters of 12), and under local training."""
    runs = {"fedsub": [], "one cluster": ["algorithm.min_cluster_size=12"], "local": ["algorithm.name=local"]}
    return {name: _run_keeping_devices(overrides) for name, overrides in runs.items()}


def test_fedsub_recovers_the_planted_groups_in_a_run(planted_runs):
    """Each device's last clustering of each class, against the groups the data were drawn from
    (which FedSub never sees): adjusted Rand index >= 0.9 on every device and class."""
    _, devices, data = planted_runs["fedsub"]
    ari: dict[int, list[float]] = {}
    for c in range(data.num_classes):
        for fedsub in devices:
            labels = fedsub.last_clusters[c]
            members = sorted(labels)
            assert members == list(range(len(devices)))   # a complete graph: everyone in view
            ari.setdefault(c, []).append(adjusted_rand_score(data.groups[members, c], [labels[m] for m in members]))
    assert all(min(v) >= 0.9 for v in ari.values()), {c: min(v) for c, v in ari.items()}
    # and they are used: fusing with each class's group beats fusing with everyone
    f1 = {name: run[0]["final"]["f1_macro_mean"] for name, run in planted_runs.items()}
    assert planted_runs["one cluster"][0]["algorithm_stats"]["k_mean"] == 1
    assert f1["fedsub"] > f1["one cluster"], f1


@pytest.mark.xfail(strict=True, reason=(
    "FedSub recovers the groups (ARI 1.0) yet scores below local training here (F1 0.767 vs 0.935 "
    "after fusion, 0.854 vs 0.945 after training): naive subnetworks hold nearly every hidden unit "
    "for every class, so a device's hidden rows are averaged over the union of its four class "
    "clusters (~9 of 12 devices), and the groups are drawn independently per class. Where the "
    "group-mates are the same in every class (user types), FedSub beats local training: the test below"))
def test_fedsub_beats_local_training_on_the_planted_groups(planted_runs):
    f1 = {name: run[0]["final"]["f1_macro_mean"] for name, run in planted_runs.items()}
    assert f1["fedsub"] > f1["local"], f1


@pytest.mark.parametrize("seed", [3, 4])
def test_fedsub_beats_local_training_where_group_mates_are_alike_in_every_class(seed):
    """Planted user types (``shared_groups``: a device's group is the same for all its classes)
    and scarce data (10 samples per class and device, 30 rounds): FedSub's clusters are the user
    types, so the union of a device's class clusters is its own group, and fusing with it beats
    training alone, after fusion and after training, on each seed. With groups drawn per class
    the same data sizes leave FedSub far below local training (0.41-0.76 against 0.75-0.87 on
    seeds 3-5, measured for issue 30): the test above."""
    common = ["rounds=30", "dataset.synthetic.shared_groups=true", "dataset.synthetic.samples_per_class=10",
              f"seed={seed}"]
    fedsub, devices, data = _run_keeping_devices(common)
    local = _run_keeping_devices([*common, "algorithm.name=local"])[0]
    assert len({tuple(row) for row in data.groups}) == 3      # three user types, alike in every class
    ari = [adjusted_rand_score(data.groups[sorted(labels), c], [labels[m] for m in sorted(labels)])
           for c in range(data.num_classes) for labels in (d.last_clusters[c] for d in devices)]
    # 7 training samples a class: a noisy prototype may stray (seed 4: one class of four, ARI 0.52)
    assert np.median(ari) == 1.0 and np.mean(ari) >= 0.8, ari
    for column in ("f1_after_fusion_mean", "f1_after_training_mean"):
        assert fedsub["final"][column] > local["final"][column] + 0.02, (column, fedsub["final"], local["final"])


def test_two_phase_sends_fewer_bytes_and_still_fuses_with_mates(repo_root, tmp_path):
    both = {ex: _run(repo_root, tmp_path, ex, [*SMALL, "rounds=5", f"algorithm.exchange={ex}"])
            for ex in ("broadcast", "two-phase")}
    tp, bc = both["two-phase"], both["broadcast"]
    assert tp["algorithm_stats"]["fusions_with_mate_fraction"] > 0.3, tp["algorithm_stats"]
    assert tp["comm"]["messages_dropped"] == 0
    assert tp["comm"]["bytes_per_device_per_round"] < 0.7 * bc["comm"]["bytes_per_device_per_round"]
    # each addressed subnetwork message carries only the requested classes: smaller than a broadcast's
    assert tp["algorithm_stats"]["subnet_message_bytes"] < bc["algorithm_stats"]["subnet_message_bytes"]


def test_two_phase_subnetworks_go_only_to_the_mates_that_asked_for_those_classes(repo_root):
    loaded = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml",
                           [*SMALL, "algorithm.exchange=two-phase"])
    algos = build_algorithms(loaded, loaded.federation)
    everyone = list(range(len(algos)))
    for a in algos:
        a.ctx.neighbours = lambda a=a: [j for j in everyone if j != a.ctx.device_id]

    def exchange(round):
        parts = [a.share(round) for a in algos]
        for dst, a in enumerate(algos):
            for src, ps in enumerate(parts):
                for p in ps:
                    if src != dst and p.meta.get("to", dst) == dst:
                        a.receive(Received(sender=src, round=round, sent_at=float(round), received_at=round + 0.5,
                                           payload=p))
        return parts

    first = exchange(0)
    assert all(len(ps) == 1 and ps[0].meta["part"] == "prototypes" for ps in first)  # nothing asked yet
    for a in algos:
        fuse_once(a, 0, 1.0)
    asked = {(i, peer): set(classes) for i, a in enumerate(algos) for peer, classes in a.requests.items()}
    assert asked, "no device asked anyone: the clusters are singletons"
    exchange(1)             # the requests travel with the prototypes...
    second = exchange(2)    # ...and the asked peers answer at their next share
    sent = {(p.meta["to"], src): set(p.meta["classes"]) for src, ps in enumerate(second) for p in ps[1:]}
    assert sent and set(sent) == set(asked)
    for key, classes in sent.items():
        assert classes == asked[key] & set(algos[key[1]].own.classes)
    # a part addressed to another peer is refused by name
    stray = next(p for ps in second for p in ps[1:])
    other = next(a for a in algos if a.ctx.device_id != stray.meta["to"])
    with pytest.raises(Exception, match="'to' addresses peer"):
        other.check(stray)


def test_an_expired_part_leaves_the_peer_view_before_the_peers_next_part_arrives(repo_root):
    """The TTL drops a peer's parts at a step with nothing new to fuse; the peer's next part then
    merges with what is left (this raised KeyError at 1,000 devices over random-waypoint contacts)."""
    loaded = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml", SMALL)
    me, peer = build_algorithms(loaded, loaded.federation)[:2]
    protos, subnetworks = peer.share(0)
    for t, p in ((0.0, protos), (5.0, subnetworks)):
        me.receive(Received(sender=1, round=0, sent_at=t, received_at=t, payload=p))
    assert me.peers[1].values is not None
    me.take_fresh()
    me.drop_stale(28.0, max_age_s=25.0)   # a step with nothing new: the prototype part expires
    assert set(me.cache) == {(1, "subnetworks")} and not me.peers
    me.drop_stale(31.0, max_age_s=25.0)   # and then the subnetworks
    assert not me.cache
    protos = peer.share(1)[0]
    me.receive(Received(sender=1, round=1, sent_at=40.0, received_at=40.0, payload=protos))
    assert set(me.peers) == {1} and me.peers[1].values is None   # clustered, nothing to fuse yet


class Addressed(Algorithm):
    """Shares a small part for everyone and a big one addressed to one peer."""

    name = "addressed"
    message_kind = "test/addressed"
    parts = ("prototypes", "subnetworks")

    def __init__(self, to: int | None, big: int) -> None:
        super().__init__(ctx=stub_context(), options=None)
        self.to, self.big, self.got = to, big, []

    def train(self, round: int) -> None:
        return None

    def share(self, round: int) -> list[Payload]:
        parts = [Payload({"part": "prototypes"}, {"data": np.zeros(1000, dtype=np.uint8)})]
        if self.to is not None:
            parts.append(Payload({"part": "subnetworks", "to": self.to}, {"data": np.zeros(self.big, dtype=np.uint8)}))
        return parts

    def receive(self, item: Received) -> None:
        self.got.append((item.sender, item.payload.meta["part"]))
        super().receive(item)


@pytest.mark.parametrize("big, aborted", [(100_000, 0), (2_000_000, 1)])
def test_contact_runtime_carries_an_addressed_part_only_to_its_peer_and_aborts_what_does_not_fit(big, aborted):
    algos = [Addressed(to=1, big=big), Addressed(None, 0), Addressed(None, 0)]
    recorder = Recorder(3)
    contacts = [make_contact(0, 1, 0.0, 10.0, 1e6, 0.0), make_contact(0, 2, 0.0, 10.0, 1e6, 0.0)]
    sim = OpportunisticSimulation(algos, ContactPlan(3, contacts),
                                  AsyncSchedule(duration_s=50.0, train_period_s=500.0, eval_every_s=50.0),
                                  recorder, np.random.default_rng(0), max_message_bytes=8 * 2**20,
                                  first_training_s=[0.0] * 3)
    sim.run()
    assert (0, "prototypes") in algos[2].got and (0, "subnetworks") not in algos[2].got
    assert ((0, "subnetworks") in algos[1].got) == (not aborted)
    assert recorder.devices[0].transfers_aborted == aborted
    assert (recorder.devices[0].bytes_wasted > 0) == bool(aborted)


def test_two_phase_runs_over_contacts(repo_root, tmp_path):
    s = _run(repo_root, tmp_path, "contacts",
             ["dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=20", "model.hidden=[16,32]",
              "contacts.kind=static", "contacts.duration_s=600", "asynchronous.train_period_s=60",
              "evaluation.every_s=150", "algorithm.exchange=two-phase", "algorithm.kmeans_n_init=2"])
    assert s["comm"]["messages_dropped"] == 0
    assert s["algorithm_stats"]["fusions_with_mate_fraction"] > 0, s["algorithm_stats"]
    assert s["algorithm_stats"]["subnet_message_bytes"] > 0
