"""FedSub's optional mechanisms on small synthetic data: missing-prototype prediction, prototype
noise, overlap fusion through ``FedSub.fuse``, and classes that appear over time."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from p2pfed.algorithms.base import Received
from p2pfed.cli.main import main
from p2pfed.data.dynamic import draw_class_schedule
from p2pfed.algorithms.fedsub.collaborative import predict_missing, similarity_matrix
from p2pfed.algorithms.fedsub.privacy import noise_std
from p2pfed.algorithms.fedsub.subnetworks import parameter_masks
from p2pfed.scenario.build import build_algorithms
from p2pfed.scenario.loader import load_scenario
from p2pfed.scenario.errors import ScenarioError
from p2pfed.testing import whole_share, fuse_once, train_once
from tests.compare_runs import keeps_local_gain, run_from_start

SMALL = ["rounds=3", "dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=20",
         "model.hidden=[16,32]"]


def _planted_prototypes(seed: int, members: int = 15, types: int = 3, classes: int = 4,
                        dim: int = 16, noise: float = 0.2) -> tuple[dict, np.ndarray]:
    """Members of one latent user type share every class's prototype up to noise; types differ.
    Features are non-negative, like the post-ReLU features prototypes are built from."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 2, size=(types, classes, dim))
    kind = np.arange(members) % types
    protos = {m: {c: np.abs(centres[kind[m], c] + noise * rng.normal(size=dim)).astype(np.float32)
                  for c in range(classes)} for m in range(members)}
    return protos, kind


@pytest.mark.parametrize("seed", range(5))
def test_cf_prediction_recovers_held_out_prototype_better_than_mean_of_peers(seed):
    protos, _ = _planted_prototypes(seed)
    truth = protos[0].pop(2)
    predicted = predict_missing(protos, num_neighbors=3)
    assert set(predicted) == {0} and set(predicted[0]) == {2}
    mean_of_all = np.mean([protos[m][2] for m in protos if m != 0], axis=0)
    err_cf = np.linalg.norm(predicted[0][2] - truth)
    err_mean = np.linalg.norm(mean_of_all - truth)
    assert err_cf < 0.75 * err_mean, (err_cf, err_mean)


def test_similarity_is_mean_cosine_over_shared_classes_and_weights_by_similarity():
    a, b = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    protos = {0: {0: a, 1: a}, 1: {0: a, 1: b, 2: 3 * a}, 2: {1: a, 2: 3 * b}, 3: {5: a}}
    members, sim = similarity_matrix(protos)
    assert members == [0, 1, 2, 3]
    assert sim[0, 1] == pytest.approx(0.5) and sim[1, 0] == pytest.approx(0.5)   # (1 + 0) / 2
    assert sim[0, 2] == pytest.approx(1.0)                                       # class 1 only
    assert np.isnan(sim[0, 3]) and np.isnan(sim[0, 0])                           # nothing shared
    pred = predict_missing(protos, num_neighbors=2)
    # Eq. 2 for member 0, class 2: (0.5 * 3a + 1.0 * 3b) / 1.5
    np.testing.assert_allclose(pred[0][2], (0.5 * 3 * a + 3 * b) / 1.5, rtol=1e-6)
    assert 3 not in pred                    # member 3 is similar to no one: nothing predicted
    assert 5 not in pred.get(0, {})         # nobody similar to 0 holds class 5
    one = predict_missing(protos, num_neighbors=1)
    np.testing.assert_allclose(one[0][2], 3 * b, rtol=1e-6)   # the single most similar member
    with pytest.raises(ValueError):
        predict_missing(protos, num_neighbors=0)


def _exchange(algos, round=0):
    """Everyone trains and shares once; every payload reaches every other device."""
    payloads = []
    for a in algos:
        train_once(a, round)
        payloads.append(whole_share(a, round))
    for dst, a in enumerate(algos):
        for src, p in enumerate(payloads):
            if src != dst:
                a.receive(Received(sender=src, round=round, sent_at=0.0, received_at=1.0, payload=p))


def _build(repo_root, extra=(), seed=3):
    loaded = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml", [*SMALL, *extra], seed=seed)
    return build_algorithms(loaded, loaded.federation)


def _overlap_violations(fusion: str) -> tuple[int, int, int]:
    """Fuse every device once; count parameters changed outside the union (over the device's
    classes) of the intersection of its cluster-mates' subnetworks, parameters changed at all, and
    parameters some mate holds but not every mate (what a wrong fusion would touch)."""
    root = Path(__file__).resolve().parents[1]
    algos = _build(root, ["dataset.synthetic.num_devices=12", "dataset.synthetic.classes_per_device=2",
                          f"algorithm.fusion={fusion}", "algorithm.kmeans_n_init=2"])
    _exchange(algos)
    outside = changed_total = partial_total = 0
    for i, me in enumerate(algos):
        model = me.ctx.model
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        fuse_once(me, 0, 1.0)
        allowed = {n: torch.zeros_like(p, dtype=torch.bool) for n, p in before.items()}
        partial = {n: torch.zeros_like(p, dtype=torch.bool) for n, p in before.items()}
        view = {i: me.own, **me.peers}
        for c in me.own.classes:
            members = sorted(m for m in view if c in view[m].classes)
            points = np.stack([view[m].prototypes[view[m].classes.index(c)] for m in members])
            labels = me.clusterings.cluster(points, k_max=None, n_init=2, k_rule=me.options.k_rule,
                                            min_cluster_size=me.options.min_cluster_size).labels
            mates = [view[m] for m, lab in zip(members, labels) if lab == labels[members.index(i)]]
            masks = [parameter_masks(model, a.units[c]) for a in mates]
            for n in allowed:
                stacked = torch.stack([mk[n] for mk in masks])
                allowed[n] |= stacked.all(dim=0)
                partial[n] |= stacked.any(dim=0) & ~stacked.all(dim=0)
        for n, p in model.named_parameters():
            diff = p.detach() != before[n]
            changed_total += int(diff.sum())
            outside += int((diff & ~allowed[n]).sum())
            partial_total += int((partial[n] & ~allowed[n]).sum())
    return outside, changed_total, partial_total


def test_overlap_fusion_changes_only_parameters_every_cluster_mate_holds():
    outside, changed, partial = _overlap_violations("overlap")
    assert changed > 0, "fusion changed nothing: the test is vacuous"
    assert partial > 0, "every mate held the same parameters: the test cannot tell fusions apart"
    assert outside == 0, f"{outside} parameters outside the cluster-mates' overlap changed"
    # the same check catches a fusion that also averages parameters only some mates hold
    assert _overlap_violations("cluster-avg")[0] > 0


def test_gaussian_and_laplace_noise_have_the_configured_scale(repo_root):
    # embedding prototypes: 256 coordinates per class, enough to measure the noise's scale
    hidden = ["model.hidden=[16,256]", "algorithm.prototypes=embedding"]
    for extra, std in [(["algorithm.proto_noise=gaussian", "algorithm.proto_noise_sigma=0.5"], 0.5),
                       (["algorithm.proto_noise=laplace", "algorithm.proto_noise_epsilon=2.0",
                         "algorithm.proto_noise_sensitivity=0.5"], np.sqrt(2) * 0.25),
                       ([], 0.0)]:
        algo = _build(repo_root, [*hidden, *extra])[0]
        train_once(algo, 0)
        sent = whole_share(algo, 0).tensors["prototypes"]
        diff = sent - algo.own.prototypes
        assert diff.size >= 4 * 256
        assert float(diff.std()) == pytest.approx(std, rel=0.1, abs=1e-9)
        assert float(np.abs(diff.mean())) < 0.1 * max(std, 1e-3) + 1e-9
    assert noise_std("laplace", epsilon=2.0, sensitivity=0.5) == pytest.approx(np.sqrt(2) * 0.25)


def test_input_prototypes_are_class_means_of_the_data_noised_once_per_dataset(repo_root):
    """The papers' prototypes: class means of the input data, fixed while the data are; the
    noise on them is drawn once, so repeating the share does not let a peer average it away."""
    algo = _build(repo_root, ["algorithm.proto_noise=gaussian", "algorithm.proto_noise_sigma=0.5"])[0]
    x, y = algo.ctx.x_train.numpy(), algo.ctx.y_train.numpy()
    first = whole_share(algo, 0)
    train_once(algo, 0)
    second = whole_share(algo, 1)
    classes = first.meta["classes"]
    assert algo.own.prototypes.shape == (len(classes), x.shape[1])
    np.testing.assert_allclose(algo.own.prototypes, np.stack([x[y == c].mean(axis=0) for c in classes]),
                               rtol=1e-5, atol=1e-6)
    assert not np.allclose(first.tensors["prototypes"], algo.own.prototypes)      # noised
    np.testing.assert_array_equal(first.tensors["prototypes"], second.tensors["prototypes"])
    # new local data: new prototypes, new noise
    algo.ctx.set_visible_classes(frozenset(classes[:2]))
    third = whole_share(algo, 2)
    assert third.meta["classes"] == classes[:2]
    assert not np.array_equal(third.tensors["prototypes"], first.tensors["prototypes"][:2])


@pytest.mark.parametrize("sets, problem", [
    (["algorithm.proto_noise=gaussian"], "needs proto_noise_sigma"),
    (["algorithm.proto_noise=laplace"], "needs proto_noise_epsilon"),
    (["algorithm.proto_noise_sigma=0.1"], "proto_noise_sigma is set but proto_noise is 'none'"),
    (["algorithm.predict_neighbors=0"], "algorithm.predict_neighbors"),
    (["dynamic.max_removed_fraction=1.0"], "dynamic.max_removed_fraction"),
    (["dynamic.devices_fraction=1.5"], "dynamic.devices_fraction"),
])
def test_bad_new_options_are_named(repo_root, sets, problem):
    with pytest.raises(ScenarioError) as err:
        load_scenario(repo_root / "scenarios" / "synthetic-small.yaml", sets)
    assert problem in str(err.value) and "synthetic-small.yaml" in str(err.value)


def test_predicted_prototypes_let_a_device_fuse_classes_it_has_no_data_for(repo_root):
    extra = ["dataset.synthetic.classes_per_device=2", "algorithm.predict_missing=true",
             "algorithm.predict_neighbors=2", "algorithm.kmeans_n_init=2"]
    algos = _build(repo_root, extra)
    _exchange(algos)
    me = algos[0]
    missing = sorted(set(range(4)) - set(me.own.classes))
    before = {n: p.detach().clone() for n, p in me.ctx.model.named_parameters()}
    fuse_once(me, 0, 1.0)
    assert me.last_predicted >= 1
    assert set(me.last_k) > set(me.own.classes) and set(me.last_k) & set(missing)
    # the output row of a missing class can only change through a fused peer subnetwork
    w = me.ctx.model.layers[-1].weight.detach()
    assert any(not torch.equal(w[c], before["layers.1.weight"][c]) for c in missing)
    # without prediction the same device leaves those rows alone
    plain = _build(repo_root, extra[:1] + extra[3:])
    _exchange(plain)
    before = plain[0].ctx.model.layers[-1].weight.detach().clone()
    fuse_once(plain[0], 0, 1.0)
    assert all(torch.equal(plain[0].ctx.model.layers[-1].weight.detach()[c], before[c]) for c in missing)


def test_predict_for_own_predicts_only_the_devices_hidden_training_classes(repo_root):
    """Alg. 3 as written predicts a device's prototype for every class a peer holds, classes it
    will never have included; ``predict_for: own`` keeps only its own training classes hidden for
    now (a dynamic class schedule), as a device with a returning class would want."""
    extra = ["dataset.synthetic.classes_per_device=2", "algorithm.predict_missing=true",
             "algorithm.predict_neighbors=2", "algorithm.kmeans_n_init=2"]
    clustered = {}
    for predict_for in ("all", "own"):
        algos = _build(repo_root, [*extra, f"algorithm.predict_for={predict_for}"])
        me = algos[0]
        own = sorted(int(c) for c in np.unique(me.ctx.device.y_train))
        hidden, kept = own[0], own[1]
        me.ctx.set_visible_classes(frozenset({kept}))   # one own class hidden, to return later
        _exchange(algos)
        fuse_once(me, 0, 1.0)
        clustered[predict_for] = set(me.last_k)
        never = set(range(4)) - set(own)
    assert clustered["all"] & never                    # literal: classes it will never have
    assert clustered["own"] == {hidden, kept}          # own: its hidden class, predicted, and the kept one
    assert hidden in clustered["all"]


def test_class_schedule_hides_and_returns_classes_on_time():
    held = [np.repeat(np.arange(6), 3) for _ in range(10)]
    sched = draw_class_schedule(held, devices_fraction=0.6, max_removed_fraction=0.8, return_every=5,
                                rng=np.random.default_rng(0))
    assert len(sched.removed) == 6
    for d in range(10):
        hidden = sched.removed.get(d, ())
        assert len(hidden) <= 4 and len(set(hidden)) == len(hidden)   # floor(0.8 * 6)
        for r in range(0, 40):
            vis = sched.visible(d, r)
            back = r // 5
            if back >= len(hidden):
                assert vis is None
            else:
                assert vis == frozenset(range(6)) - frozenset(hidden[back:])
                assert len(vis) >= 2
    assert sched.return_rounds(12) == [5, 10]


def test_dynamic_scenario_trains_on_the_scheduled_classes_and_tests_on_all(repo_root, tmp_path):
    from p2pfed.engine.simulation import RoundSchedule, Simulation
    from p2pfed.network.topology import build_topology
    from p2pfed.results.recorder import Recorder
    from p2pfed.scenario.build import build_class_schedule
    loaded = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml",
                           [*SMALL, "rounds=7", "algorithm.name=local", "dynamic.devices_fraction=0.5",
                            "dynamic.return_every=2", "dynamic.test_classes=all"])
    dataset = loaded.federation
    algos = build_algorithms(loaded, dataset)
    sched = build_class_schedule(loaded, dataset)
    assert sched is not None and len(sched.removed) == 3
    seen: dict[tuple[int, int], set] = {}
    for i, a in enumerate(algos):
        def spy(r, a=a, i=i):
            seen[i, r] = set(a.ctx.y_train.unique().tolist())
            assert len(a.ctx.y_test.unique()) == 4
        a.train = spy
    sim = Simulation(algos, build_topology("complete", 6, seed=0), RoundSchedule(7, 10.0), Recorder(6),
                     np.random.default_rng(0), max_message_bytes=2**20, class_schedule=sched)
    sim.run()
    for (i, r), classes in seen.items():
        vis = sched.visible(i, r)
        assert classes == (set(range(4)) if vis is None else set(vis))
    changed = next(iter(sched.removed))
    assert seen[changed, 0] < seen[changed, 6]


def test_new_options_run_from_a_scenario_file(tmp_path):
    scenario = tmp_path / "options.yaml"
    scenario.write_text("""
name: options
seed: 2
rounds: 4
dataset:
  name: synthetic
  synthetic: {num_devices: 6, num_classes: 4, samples_per_class: 20, classes_per_device: 3}
model: {hidden: [16, 32]}
algorithm:
  name: fedsub
  extraction: lrp-a1b0
  predict_missing: true
  predict_neighbors: 2
  proto_noise: laplace
  proto_noise_epsilon: 5.0
  proto_noise_sensitivity: 0.2
topology: {kind: complete}
engine: {precision: float16}
dynamic: {devices_fraction: 0.5, max_removed_fraction: 0.7, return_every: 2}
""")
    out = tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["algorithm"]["proto_noise"] == "laplace"
    assert summary["config"]["dynamic"]["return_every"] == 2
    assert summary["dynamic"]["return_rounds"] == [3]
    assert summary["algorithm_stats"]["predicted_classes_fused"] > 0
    assert summary["comm"]["messages_dropped"] == 0
    assert summary["final"]["f1_macro_mean"] is not None


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_subnetwork_encoding_round_trips_through_the_codec_with_one_bit_per_unit(repo_root, precision):
    from p2pfed.algorithms.base import ArtifactError, Payload
    from p2pfed.algorithms.fedsub.method import decode_subnetworks, encode_subnetworks
    from p2pfed.learning.units import unit_layers
    from p2pfed.algorithms.fedsub.subnetworks import union_units
    from p2pfed.transport import Message, decode, encode
    from p2pfed.transport.precision import PRECISION_KEY, reduce_precision, restore_precision
    float16 = precision == "float16"
    algo = _build(repo_root, ["model.hidden=[13,30]", "algorithm.extraction=lrp-a1b0"])[0]
    train_once(algo, 0)
    algo._extract()
    own = algo.own
    model = algo.ctx.model
    tensors = encode_subnetworks(dict(model.named_parameters()), unit_layers(model), own.units)
    total_units = 13 + 30 + 4
    assert tensors["units"].dtype == np.uint8 and tensors["units"].shape == (len(own.classes), 6)
    meta, wire = reduce_precision({}, tensors, precision)
    msg = decode(encode(Message(kind="fedsub/artifacts", sender=0, round=0, sent_at=0.0, meta=meta,
                                tensors=wire)))
    assert {t.dtype for t in msg.tensors.values() if t.dtype.kind == "f" and t.size} == {
        np.dtype(np.float16 if float16 else np.float32)}
    restored = restore_precision(msg.meta.get(PRECISION_KEY), dict(msg.tensors))
    units, values = decode_subnetworks(unit_layers(model), own.classes, Payload({}, restored))
    for c in own.classes:
        assert [u.tolist() for u in units[c]] == [u.tolist() for u in own.units[c]]
    union = union_units(own.units)
    assert sum(int(u.sum()) for u in union) < total_units      # some rows are really left out
    for i, layer in enumerate(model.layers):
        rows = torch.as_tensor(union[i])
        sent = values[f"layers.{i}.weight"]
        torch.testing.assert_close(sent[rows], layer.weight.detach()[rows],
                                   rtol=1e-3 if float16 else 0, atol=1e-3 if float16 else 0)
        assert not bool(sent[~rows].any())
    bad = dict(tensors, units=np.unpackbits(tensors["units"], axis=1, count=total_units).astype(bool))
    with pytest.raises(ArtifactError, match="units"):
        decode_subnetworks(unit_layers(model), own.classes, Payload({}, bad))



def test_a_broadcast_is_expanded_once_for_its_receivers_and_each_receiver_still_checks_it(repo_root):
    """The simulators give every receiver of a broadcast the same decoded arrays and memo: FedSub
    builds the dense copy once, but a receiver whose model does not fit still refuses it."""
    from p2pfed.algorithms.base import ArtifactError, Payload
    from p2pfed.algorithms.fedsub.method import decode_subnetworks, encode_subnetworks
    from p2pfed.learning.units import unit_layers
    from p2pfed.learning.model import MLP
    algo = _build(repo_root, ["model.hidden=[13,30]"])[0]
    train_once(algo, 0)
    algo._extract()
    model, own = algo.ctx.model, algo.own
    tensors = encode_subnetworks(dict(model.named_parameters()), unit_layers(model), own.units)
    shared: dict = {}   # one decoded message's memo, as every receiver of a broadcast gets it
    first = decode_subnetworks(unit_layers(model), own.classes, Payload({}, tensors, shared))
    second = decode_subnetworks(unit_layers(model), own.classes, Payload({}, tensors, shared))
    assert second[1] is first[1] and second[0] is first[0] and len(shared) == 1
    alone = decode_subnetworks(unit_layers(model), own.classes, Payload({}, tensors))   # a message of its own
    assert alone[1] is not first[1]
    for name, value in alone[1].items():
        assert torch.equal(value, first[1][name])
    other_shape = MLP(model.layers[0].in_features, [13, 31], model.layers[-1].out_features)
    with pytest.raises(ArtifactError):
        decode_subnetworks(unit_layers(other_shape), own.classes, Payload({}, tensors, shared))
    narrower_rows = dict(tensors, **{"layers.0.weight": tensors["layers.0.weight"][:-1]})
    with pytest.raises(ArtifactError, match="layers.0.weight"):   # checked even with the memo built
        decode_subnetworks(unit_layers(model), own.classes, Payload({}, narrower_rows, shared))

def test_partial_depth_keeps_the_later_layers_local(repo_root):
    algos = _build(repo_root, ["dataset.synthetic.num_devices=8", "algorithm.depth=partial",
                               "algorithm.shared_layers=1", "algorithm.kmeans_n_init=2"])
    _exchange(algos)
    changed_first = 0
    for me in algos:
        before = {n: p.detach().clone() for n, p in me.ctx.model.named_parameters()}
        fuse_once(me, 0, 1.0)
        after = dict(me.ctx.model.named_parameters())
        for n, p in before.items():
            if n.startswith("layers.0."):
                changed_first += int((after[n].detach() != p).sum())
            else:
                assert torch.equal(after[n].detach(), p), f"{n} changed although only layer 0 is shared"
    assert changed_first > 0, "nothing was fused: the test is vacuous"


@pytest.mark.parametrize("score", ["equal", "size", "accuracy", "size-accuracy"])
def test_reliability_scores_follow_the_paper(repo_root, score):
    from p2pfed.learning.training import per_class_accuracy

    (me, *_rest) = _build(repo_root, ["dataset.synthetic.num_devices=3",
                                      "dataset.synthetic.classes_per_device=3",
                                      f"algorithm.score={score}"])
    train_once(me, 0)
    payload = whole_share(me, 0)
    classes = payload.meta["classes"]
    counts = np.array(payload.meta["counts"], dtype=float)
    acc = per_class_accuracy(me.ctx.model, me.ctx.x_train, me.ctx.y_train, me.ctx.num_classes)[classes]
    expected = {"equal": np.ones(len(classes)), "size": counts, "accuracy": acc,
                "size-accuracy": counts * acc}[score]
    np.testing.assert_allclose(payload.meta["scores"], expected, rtol=1e-6)


@pytest.mark.parametrize("fusion", ["overlap", "cluster-avg", "leadership"])
@pytest.mark.parametrize("extraction", ["naive", "lrp-a1b0", "lrp-a2b1"])
def test_every_fusion_and_extraction_runs_from_a_scenario(repo_root, fusion, extraction):

    data = [*SMALL, "rounds=10", "training.lr=0.1"]
    loaded = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml",
                           [*data, f"algorithm.fusion={fusion}", f"algorithm.extraction={extraction}"])
    summary, start = run_from_start(loaded)
    assert summary["comm"]["messages_dropped"] == 0
    keeps_local_gain(summary, start, repo_root / "scenarios" / "synthetic-small.yaml", data)
