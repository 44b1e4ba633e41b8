"""The serverless baselines: whole runs on planted synthetic data, and each method's own rule."""


import numpy as np
import pytest
import torch

from p2pfed.algorithms import ArtifactError, Payload, Received
from p2pfed.algorithms.averaging.fedclar import cluster_of_first
from p2pfed.data import FederatedDataset, make_synthetic
from p2pfed.algorithms.averaging.balancing import smote_balance
from p2pfed.learning.prototypes import average_prototypes
from p2pfed.learning.training import evaluate
from p2pfed.scenario.build import build_algorithms
from p2pfed.scenario.loader import load_scenario
from p2pfed.testing import Federation, fuse_once, train_once
from tests.compare_runs import keeps_local_gain, run_from_start
from tests.hand_driven import two_populations

BASELINES = ["fedprox", "ditto", "fedproto", "protohar", "fedper", "fedrep", "fedhome", "fedclar"]
TINY = ["rounds=8", "training.lr=0.1", "dataset.synthetic.num_devices=6",
        "dataset.synthetic.samples_per_class=24", "dataset.synthetic.groups_per_class=2",
        "model.hidden=[16,32]"]


def scenario(repo_root, name, *extra):
    return load_scenario(repo_root / "scenarios" / "synthetic-small.yaml",
                         [*TINY, f"algorithm.name={name}", *extra])


def drive(algos, rounds, start=0):
    """Synchronous rounds on a complete graph through the real device loop and intake, then each
    device's fusion of the last round's shares."""
    federation = Federation(algos)
    federation.next_round = start
    federation.run(rounds)
    for a in algos:
        fuse_once(a, start + rounds, float(start + rounds))


def params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("name", BASELINES)
def test_baseline_runs_end_to_end_and_learns_like_local_training(repo_root, name):
    extra = ["algorithm.fine_tune_rounds=2"] if name in ("fedhome", "fedclar") else []
    summary, start = run_from_start(scenario(repo_root, name, *extra))
    keeps_local_gain(summary, start, repo_root / "scenarios" / "synthetic-small.yaml", TINY)
    comm = summary["comm"]
    assert comm["messages_dropped"] == 0
    # complete graph of 6: 5 messages per device per round, none in the final local rounds
    talking_rounds = 8 - 2 if extra else 8
    assert comm["messages_sent"] == 6 * 5 * talking_rounds
    ratio = comm["bytes_per_message_vs_full_model"]
    if name == "fedproto":
        assert ratio < 0.5  # prototypes only
    elif name in ("fedper", "fedrep"):
        assert ratio < 1.0  # the body only
    elif name != "protohar":  # body + prototypes: its payload test checks the contents
        assert ratio >= 1.0  # the whole model


def test_fedprox_with_mu_zero_is_gossip_avg_local_step(repo_root):
    def trained(name, *extra):
        algo = build_algorithms(scenario(repo_root, name, *extra), _tiny_data())[0]
        train_once(algo, 0)
        return params(algo.ctx.model)

    plain = trained("gossip-avg")
    assert all(torch.equal(plain[n], p) for n, p in trained("fedprox", "algorithm.mu=0").items())
    assert not all(torch.equal(plain[n], p) for n, p in trained("fedprox", "algorithm.mu=5").items())


def test_fedprox_pulls_toward_the_round_start(repo_root):
    data = _tiny_data()

    def drift(mu):
        algo = build_algorithms(scenario(repo_root, "fedprox", f"algorithm.mu={mu}"), data)[0]
        start = params(algo.ctx.model)
        for r in range(3):
            train_once(algo, r)
        return sum(float(((p - start[n]) ** 2).sum()) for n, p in params(algo.ctx.model).items())

    assert drift(10.0) < 0.5 * drift(0.0)


def test_fedper_fusion_never_touches_the_head(repo_root):
    algos = build_algorithms(scenario(repo_root, "fedper"), _tiny_data())
    a, b = algos[0], algos[1]
    train_once(a, 0)
    train_once(b, 0)
    payload = a.share(0)
    assert set(payload.tensors) == set(a.body) and a.head == ["layers.2.weight", "layers.2.bias"]
    before = params(b.ctx.model)
    b.receive(Received(sender=0, round=0, sent_at=0.0, received_at=0.0, payload=payload))
    fuse_once(b, 0, 1.0)
    after = params(b.ctx.model)
    for n in b.head:
        assert torch.equal(after[n], before[n])
    wa, wb = a.ctx.num_samples, b.ctx.num_samples
    for n in b.body:
        expected = (before[n].double() * wb + torch.from_numpy(payload.tensors[n]).double() * wa) / (wa + wb)
        assert torch.allclose(after[n], expected.float(), atol=1e-6)
        assert not torch.equal(after[n], before[n])


def test_head_layers_must_leave_a_body(repo_root):
    with pytest.raises(ValueError, match="algorithm.head_layers"):
        build_algorithms(scenario(repo_root, "fedrep", "algorithm.head_layers=3"), _tiny_data())


def _spy_training(monkeypatch):
    """Record (epochs, trainable names, has extra loss) of every training job's run."""
    import p2pfed.learning.batched_training as module
    calls = []
    real = module.train_epochs

    def spy(model, *args, epochs=None, trainable=None, extra_loss=None, **kw):
        names = {n for n, p in model.named_parameters() if any(p is t for t in trainable)}
        calls.append((epochs, names, extra_loss is not None))
        return real(model, *args, epochs=epochs, trainable=trainable, extra_loss=extra_loss, **kw)

    monkeypatch.setattr(module, "train_epochs", spy)
    return calls


def test_fedrep_trains_head_then_body(repo_root, monkeypatch):
    calls = _spy_training(monkeypatch)
    algo = build_algorithms(scenario(repo_root, "fedrep", "algorithm.head_epochs=3"), _tiny_data())[0]
    before = params(algo.ctx.model)
    train_once(algo, 0)
    assert calls == [(3, set(algo.head), False), (None, set(algo.body), False)]
    after = params(algo.ctx.model)
    assert all(not torch.equal(after[n], before[n]) for n in algo.body + algo.head)


def test_protohar_pulls_the_body_toward_prototypes_once_it_has_them(repo_root, monkeypatch):
    calls = _spy_training(monkeypatch)
    algos = build_algorithms(scenario(repo_root, "protohar"), _tiny_data())
    drive(algos, 2)
    body, n = set(algos[0].body), len(algos)
    rounds = [calls[:2 * n], calls[2 * n:4 * n]]
    for phase in rounds:   # each device: its head phase, then its body phase
        assert sorted(c[1] == body for c in phase) == [False] * n + [True] * n
    assert not any(c[2] for c in rounds[0])  # round 0: no prototypes yet
    # round 1: the prototype pull is on the body phase only
    assert all(c[2] == (c[1] == body) for c in rounds[1])
    payload = algos[0].share(2)
    assert set(payload.tensors) == set(algos[0].body) | {"prototypes"}


def test_ditto_evaluates_a_personal_model_distinct_from_the_global_one(repo_root):
    data = _tiny_data()

    def gap(lam):
        algos = build_algorithms(scenario(repo_root, "ditto", f"algorithm.lam={lam}"), data)
        drive(algos, 4)
        a = algos[0]
        glob, pers = params(a.ctx.model), params(a.personal)
        assert a.evaluated_model() is a.personal
        assert evaluate(a.personal, a.ctx.x_test, a.ctx.y_test) != evaluate(a.ctx.model, a.ctx.x_test, a.ctx.y_test)
        return sum(float(((pers[n] - glob[n]) ** 2).sum()) for n in glob)

    loose, tight = gap(0.0), gap(20.0)
    assert loose > 0 and tight > 0
    assert tight < 0.5 * loose  # lam pulls the personal model toward the global one


def test_fedproto_shares_only_prototypes_and_averages_them_by_count(repo_root):
    algos = build_algorithms(scenario(repo_root, "fedproto"), _tiny_data())
    drive(algos, 1)
    payload = algos[1].share(1)
    assert set(payload.tensors) == {"prototypes"}
    a = algos[0]
    protos, known = a.averaged
    assert bool(known.all())
    entries = [a.parse_prototypes(r.payload) for _, r in sorted(a.cache.items())] + [a.own_prototypes]
    for c in range(4):
        rows = [(p[list(cl).index(c)], n[list(cl).index(c)]) for cl, p, n in entries if c in cl]
        expected = sum(p * n for p, n in rows) / sum(n for _, n in rows)
        assert np.allclose(protos[c].numpy(), expected, atol=1e-5)


def test_average_prototypes_weights_by_count_and_marks_missing_classes():
    e1 = (np.array([0, 2]), np.array([[1.0, 0.0], [0.0, 4.0]], dtype=np.float32), np.array([1, 3]))
    e2 = (np.array([0]), np.array([[4.0, 3.0]], dtype=np.float32), np.array([2]))
    protos, known = average_prototypes([e1, e2], num_classes=3, dim=2)
    assert known.tolist() == [True, False, True]
    assert np.allclose(protos.numpy(), [[3.0, 2.0], [0.0, 0.0], [0.0, 4.0]])


def test_smote_balances_classes_and_handles_tiny_ones():
    rng = np.random.default_rng(0)
    y = np.array([0] * 20 + [1] * 5 + [2] * 2 + [3] * 1)
    x = rng.normal(size=(len(y), 3)).astype(np.float32)
    xb, yb = smote_balance(x, y, k_neighbors=5, seed=0)
    assert np.bincount(yb).tolist() == [20, 20, 20, 20]
    assert np.array_equal(xb[:len(y)], x) and np.array_equal(yb[:len(y)], y)
    lone = x[y == 3][0]
    assert np.allclose(xb[yb == 3], lone)  # one sample: its synthetic samples are copies
    pair = x[y == 2]
    t = (xb[yb == 2] - pair[0]) @ (pair[1] - pair[0]) / np.sum((pair[1] - pair[0]) ** 2)
    assert np.all((t > -1e-5) & (t < 1 + 1e-5))  # on the segment between the two samples
    xs, ys = smote_balance(x[:20], y[:20], 5, seed=0)
    assert len(ys) == 20  # a single class: nothing to balance


def test_fedhome_fine_tunes_on_a_balanced_set_in_the_final_rounds(repo_root):
    base = make_synthetic(num_devices=2, num_classes=3, num_features=6, groups_per_class=1,
                          samples_per_class=30, seed=1)
    dev = base.devices[0]
    keep = np.concatenate([np.flatnonzero(dev.y_train == 0), np.flatnonzero(dev.y_train == 1)[:4],
                           np.flatnonzero(dev.y_train == 2)[:1]])
    dev.x_train, dev.y_train = dev.x_train[keep], dev.y_train[keep]
    algo = build_algorithms(scenario(repo_root, "fedhome", "algorithm.fine_tune_rounds=2",
                                     "dataset.synthetic.num_classes=3"), base)[0]
    assert not algo.local_phase(5) and algo.local_phase(6)
    assert algo.share(6) is None and algo.share(5) is not None
    train_once(algo, 6)
    counts = np.bincount(algo.balanced[1].numpy()).tolist()
    majority = int((dev.y_train == 0).sum())
    assert counts == [majority] * 3
    assert algo.stats()["smote_added_samples"] == 3 * majority - len(keep)
    # The reference (balance: representation): SMOTE on the frozen body's features, head trained.
    with torch.no_grad():
        assert torch.allclose(algo.balanced[0][:len(keep)], algo.ctx.model.features(algo.ctx.x_train))


def test_fedclar_clusters_devices_with_planted_identical_data(repo_root):
    data = two_populations()
    algos = build_algorithms(scenario(repo_root, "fedclar", "algorithm.cluster_round=3",
                                      "algorithm.threshold=0.5"), data)
    drive(algos, 4)
    for i, a in enumerate(algos):
        same = {j for j in range(6) if j != i and j // 3 == i // 3}
        assert a.cluster == same, (i, a.cluster)
    before = params(algos[0].ctx.model)
    drive(algos, 1, start=4)  # after clustering, fusion only mixes the device's own population
    assert all(r.sender in algos[0].cluster for r in algos[0].mates(5, list(algos[0].cache.values())))
    assert not all(torch.equal(before[n], p) for n, p in params(algos[0].ctx.model).items())


def test_cluster_of_first_cuts_at_the_threshold():
    u = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0], [0.0, 0.0]])
    assert cluster_of_first(u, 0.3).tolist() == [0, 1]
    assert cluster_of_first(u[:1], 0.3).tolist() == [0]


@pytest.mark.parametrize("name", BASELINES)
def test_payload_with_wrong_shape_is_rejected(repo_root, name):
    extra = {"fedclar": ["algorithm.cluster_round=0"],
             "fedhome": ["algorithm.fine_tune_rounds=2"]}.get(name, [])
    algos = build_algorithms(scenario(repo_root, name, *extra), _tiny_data())
    a, b = algos[0], algos[1]
    train_once(a, 0)
    good = a.share(0)
    for tensor in good.tensors:
        bad = Payload(dict(good.meta), {k: v.copy() for k, v in good.tensors.items()})
        bad.tensors[tensor] = bad.tensors[tensor][..., :-1] if bad.tensors[tensor].ndim else bad.tensors[tensor]
        with pytest.raises(ArtifactError, match=tensor):
            b.receive(Received(sender=0, round=0, sent_at=0.0, received_at=0.0, payload=bad))
    assert not b.cache
    b.receive(Received(sender=0, round=0, sent_at=0.0, received_at=0.0, payload=good))
    assert set(b.cache) == {0}


# -- data ----------------------------------------------------------------------------------

def _tiny_data() -> FederatedDataset:
    return make_synthetic(num_devices=6, num_classes=4, num_features=16, groups_per_class=2,
                          samples_per_class=24, seed=3)




def test_average_into_is_the_weighted_mean_of_read_only_peer_arrays(recwarn):
    """Gossip averaging's one arithmetic step against numpy's weighted mean (float64), with the
    peers' arrays read-only as the codec hands them over, and no warning for reading them."""
    from p2pfed.algorithms.model_payload import average_into

    rng = np.random.default_rng(7)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 3))
    own = {n: p.detach().numpy().astype(np.float64) for n, p in model.named_parameters()}
    peers = []
    for _ in range(4):
        arrays = {n: rng.standard_normal(a.shape).astype(np.float32) for n, a in own.items()}
        for a in arrays.values():
            a.flags.writeable = False
        peers.append((arrays, float(rng.integers(1, 100))))
    average_into(model, 10.0, peers)
    weights = [10.0] + [w for _, w in peers]
    for name, p in model.named_parameters():
        stack = [own[name]] + [t[name].astype(np.float64) for t, _ in peers]
        np.testing.assert_allclose(p.detach().numpy(), np.average(stack, axis=0, weights=weights), rtol=1e-6, atol=1e-7)
    assert not [w for w in recwarn.list if "not writable" in str(w.message)]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    average_into(model, 0.0, [(peers[0][0], 0.0)])   # zero total weight: unchanged
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
