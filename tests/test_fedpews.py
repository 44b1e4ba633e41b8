"""FedPeWS and FedPeWS-Fixed: learned and predefined warmup subnetworks, the switch to full
averaging, what goes on the wire, and whole runs in both simulated runtimes."""

import copy
import json

import numpy as np
import pytest
import torch

from p2pfed.algorithms import ArtifactError, Payload, Received
from p2pfed.algorithms.model_payload import average_into, model_tensors
from p2pfed.cli.main import main
from p2pfed.engine.runner import run_scenario
from p2pfed.algorithms.fedpews.neuron_masks import fixed_units, parameter_masks
from p2pfed.scenario.build import build_algorithms
from p2pfed.scenario.loader import load_scenario
from p2pfed.testing import fuse_once, train_once
from tests.compare_runs import keeps_local_gain, starting_f1_of
from tests.hand_driven import two_populations

TINY = ["rounds=10", "training.lr=0.1", "dataset.synthetic.num_devices=6",
        "dataset.synthetic.samples_per_class=24", "dataset.synthetic.groups_per_class=2",
        "model.hidden=[16,32]"]


def scenario(repo_root, name, *extra):
    return load_scenario(repo_root / "scenarios" / "synthetic-small.yaml", [*TINY, f"algorithm.name={name}", *extra])


def exchange(algos, r):
    """One synchronous round on a complete graph in the device loop's order (fuse → train → share)."""
    for a in algos:
        fuse_once(a, r, float(r))
        train_once(a, r)
    sent = [a.share(r) for a in algos]
    for i, payload in enumerate(sent):
        for j, b in enumerate(algos):
            if j != i:
                b.receive(Received(sender=i, round=r, sent_at=float(r), received_at=float(r),
                                   payload=copy.deepcopy(payload)))
    return sent


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- FedPeWS: learned masks --------------------------------------------------------------------
def test_masks_are_learned_and_differ_across_planted_groups(repo_root):
    """The scores move, and they move alike within a planted population and apart across them."""
    algos = build_algorithms(scenario(repo_root, "fedpews", "algorithm.warmup_rounds=9",
                                      "algorithm.score_lr=20"), two_populations())
    start = [torch.cat(a.scores).clone() for a in algos]
    for r in range(8):
        exchange(algos, r)
    moves = [torch.cat(a.scores) - s for a, s in zip(algos, start)]
    assert all(float(m.abs().mean()) > 0.2 for m in moves), [float(m.abs().mean()) for m in moves]
    cos = lambda a, b: float(torch.nn.functional.cosine_similarity(a, b, dim=0))  # noqa: E731
    within = [cos(moves[i], moves[j]) for i in range(6) for j in range(i + 1, 6) if i // 3 == j // 3]
    across = [cos(moves[i], moves[j]) for i in range(3) for j in range(3, 6)]
    assert np.mean(within) > np.mean(across) + 0.25, (np.mean(within), np.mean(across))


def test_the_penalty_follows_the_posters_sign(repo_root):
    """L_s = f − λ‖σ(s) − θ_neighbours‖²: with λ > 0 the mask probabilities move away from the
    neighbours' θ, with λ < 0 toward it (the task loss is the same in both)."""
    data = two_populations()
    dist = {}
    for lam in (50.0, -50.0):
        algos = build_algorithms(scenario(repo_root, "fedpews", "algorithm.warmup_rounds=9",
                                          f"algorithm.lam={lam}", "algorithm.score_lr=0.05"), data)
        exchange(algos, 0)
        exchange(algos, 1)   # round 1 trains with the neighbours' θ of round 0
        a = algos[0]
        target = a.neighbour_theta()
        dist[lam] = float(((torch.sigmoid(torch.cat(a.scores)) - target) ** 2).sum())
    assert dist[50.0] > dist[-50.0] * 2, dist


def test_after_w_rounds_whole_models_are_shared_and_averaged_like_gossip(repo_root):
    algos = build_algorithms(scenario(repo_root, "fedpews", "algorithm.warmup_rounds=2"), two_populations())
    full = sum(p.numel() for p in algos[0].ctx.model.parameters())
    sent = [exchange(algos, r) for r in range(3)]
    for r, payloads in enumerate(sent[:2]):
        assert all(p.meta["phase"] == "warmup" and "theta" in p.tensors for p in payloads)
        sizes = [sum(t.size for k, t in p.tensors.items() if k.startswith("layers.")) for p in payloads]
        assert all(0 < s < full for s in sizes), (r, sizes)
    assert all(p.meta["phase"] == "full" and "theta" not in p.tensors for p in sent[2])
    assert all(a.phase == "full" and a.phase_switches == 1 and a.warmup_rounds_done == 2 for a in algos)
    # in the full phase the fusion is gossip-avg's sample-weighted average of whole models
    a = algos[0]
    expected = copy.deepcopy(a.ctx.model)
    peers = [(model_tensors(expected, r.payload), float(r.payload.meta["num_samples"]))
             for r in (a.cache[s] for s in sorted(a.cache))]
    average_into(expected, float(a.ctx.num_samples), peers)
    fuse_once(a, 3, 3.0)
    for (n, p), (_, q) in zip(a.ctx.model.named_parameters(), expected.named_parameters()):
        torch.testing.assert_close(p, q, msg=n)


def test_warmup_fusion_averages_each_parameter_over_the_subnetworks_that_hold_it(repo_root):
    algos = build_algorithms(scenario(repo_root, "fedpews", "algorithm.warmup_rounds=5"), two_populations())
    exchange(algos, 0)
    a = algos[0]
    before = {n: p.detach().clone() for n, p in a.ctx.model.named_parameters()}
    holders = [(a.units, before, float(a.ctx.num_samples))]
    for s in sorted(a.cache):
        share = a.decode(a.cache[s].payload)
        holders.append((share.units, share.values, share.weight))
    fuse_once(a, 1, 1.0)
    masks = [parameter_masks(a.ctx.model, u) for u, _, _ in holders]
    total = sum(w for _, _, w in holders)
    partial = 0
    for name, p in a.ctx.model.named_parameters():
        num = sum(m[name].double() * v[name].double() * w for m, (_, v, w) in zip(masks, holders))
        den = sum(m[name].double() * w for m, (_, _, w) in zip(masks, holders))
        expected = torch.where(den > 0, num / den.clamp(min=1e-12), before[name].double())
        torch.testing.assert_close(p.double(), expected, msg=name)
        partial += int(((den > 0) & (den < total)).sum())
    assert partial > 0   # many parameters were averaged over only some of the members


# -- FedPeWS-Fixed: predefined subnetworks -------------------------------------------------------
def test_fixed_subsets_are_shared_units_plus_disjoint_blocks():
    sizes = [16, 32]
    masks = [fixed_units(sizes, 3, g, 0.25) for g in range(3)]
    for layer, n in enumerate(sizes):
        shared = int(round(0.25 * n))
        rows = torch.stack([m[layer] for m in masks])
        assert bool(rows[:, :shared].all())                           # everyone keeps the shared units
        assert torch.equal(rows[:, shared:].sum(dim=0), torch.ones(n - shared, dtype=torch.long))  # one owner each
    with pytest.raises(ValueError):
        fixed_units(sizes, 2, 2, 0.0)


def test_fixed_devices_train_only_their_groups_subnetwork(repo_root):
    algos = build_algorithms(scenario(repo_root, "fedpews-fixed", "algorithm.warmup_rounds=3",
                                      "algorithm.groups=2", "algorithm.shared_fraction=0.25"), two_populations())
    a = algos[1]
    before = {n: p.detach().clone() for n, p in a.ctx.model.named_parameters()}
    train_once(a, 0)
    expected_units = fixed_units([16, 32], 2, 1, 0.25)
    assert all(torch.equal(u, e) for u, e in zip(a.units, expected_units))
    masks = parameter_masks(a.ctx.model, expected_units)
    for name, p in a.ctx.model.named_parameters():
        assert torch.equal(p.detach()[~masks[name]], before[name][~masks[name]]), name   # outside: untouched
        assert not torch.equal(p.detach()[masks[name]], before[name][masks[name]]), name  # inside: trained
    share = a.share(0)
    bits = np.unpackbits(share.tensors["units"], count=48).astype(bool)
    assert bits.tolist() == torch.cat(expected_units).tolist() and "theta" not in share.tensors
    assert all(torch.equal(u, v) for u, v in zip(algos[3].round_units(), expected_units))  # 3 mod 2 == 1


@pytest.mark.parametrize("name", ["fedpews", "fedpews-fixed"])
def test_payload_with_wrong_shape_or_values_is_rejected(repo_root, name):
    algos = build_algorithms(scenario(repo_root, name, "algorithm.warmup_rounds=3"), two_populations())
    a, b = algos[0], algos[1]
    train_once(a, 0)
    good = a.share(0)
    for tensor in good.tensors:
        bad = Payload(dict(good.meta), {k: v.copy() for k, v in good.tensors.items()})
        bad.tensors[tensor] = bad.tensors[tensor][..., :-1]
        with pytest.raises(ArtifactError, match=tensor):
            b.receive(Received(sender=0, round=0, sent_at=0.0, received_at=0.0, payload=bad))
    if "theta" in good.tensors:
        bad = Payload(dict(good.meta), {**good.tensors, "theta": good.tensors["theta"] + 2})
        with pytest.raises(ArtifactError, match="theta"):
            b.receive(Received(sender=0, round=0, sent_at=0.0, received_at=0.0, payload=bad))
    with pytest.raises(ArtifactError, match="phase"):
        b.receive(Received(sender=0, round=0, sent_at=0.0, received_at=0.0,
                           payload=Payload({**good.meta, "phase": "other"}, good.tensors)))
    assert not b.cache
    b.receive(Received(sender=0, round=0, sent_at=0.0, received_at=0.0, payload=good))
    assert set(b.cache) == {0}


# -- whole runs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fedpews", "fedpews-fixed"])
def test_mechanism_fires_in_a_simulation_run(repo_root, tmp_path, name):
    extra = ["rounds=8", "algorithm.warmup_rounds=4"]
    code = main(["run", str(repo_root / "scenarios" / "synthetic-small.yaml"), "--out", str(tmp_path / name),
                 "--quiet", *sum((["--set", s] for s in [*TINY, *extra, f"algorithm.name={name}"]), [])])
    assert code == 0
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    stats = summary["algorithm_stats"]
    assert stats["warmup_rounds_done"] == 4 and stats["phase_switches"] == 1, stats
    assert 0.1 < stats["mask_density"] < 0.9 and 0 < stats["mask_overlap"] < 1, stats
    if name == "fedpews":
        assert stats["score_change"] > 0.2 and stats["mask_probability"] != 0.5, stats
    else:   # groups of 2 on a complete graph of 6: 2 neighbours share the subnetwork, 3 only the shared units
        a, b = (torch.cat(fixed_units([16, 32], 2, g, 0.1)) for g in (0, 1))
        assert stats["mask_density"] == pytest.approx(float((a.sum() + b.sum()) / 96), abs=1e-4)
        other = float((a & b).sum() / (a | b).sum())
        assert stats["mask_overlap"] == pytest.approx((2 * 1.0 + 3 * other) / 5, abs=1e-4)
    keeps_local_gain(summary, starting_f1_of(tmp_path / name), repo_root / "scenarios" / "synthetic-small.yaml",
                     [*TINY, "rounds=8"])
    gossip = run_scenario(scenario(repo_root, "gossip-avg", "rounds=8"), progress=False)
    # half the rounds carry subnetworks only: fewer bytes than whole models every round
    assert summary["comm"]["bytes_sent_total"] < 0.95 * gossip["comm"]["bytes_sent_total"]
    assert summary["comm"]["messages_sent"] == gossip["comm"]["messages_sent"]


@pytest.mark.parametrize("name", ["fedpews", "fedpews-fixed"])
def test_contact_runtime_runs_the_warmup_and_the_switch(repo_root, name):
    loaded = load_scenario(repo_root / "scenarios" / "synthetic-small.yaml", [
        "dataset.synthetic.num_devices=6", "dataset.synthetic.samples_per_class=20", "model.hidden=[16,32]",
        "contacts.kind=poisson", "contacts.mean_intercontact_s=100", "contacts.mean_duration_s=30",
        "contacts.duration_s=600", "asynchronous.train_period_s=60", "evaluation.every_s=150",
        f"algorithm.name={name}", "algorithm.warmup_rounds=4"])
    summary = run_scenario(loaded, progress=False)
    stats = summary["algorithm_stats"]
    assert summary["contacts"]["contacts"] > 0 and summary["comm"]["transfers_completed"] > 0
    assert stats["warmup_rounds_done"] == 4 and stats["phase_switches"] == 1, stats
    assert 0 < stats["mask_overlap"] < 1, stats


def test_validate_refuses_a_warmup_that_never_ends(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rounds: 6\nalgorithm: {name: fedpews, warmup_rounds: 6}\n")
    assert main(["validate", str(bad)]) == 2
    assert f"{bad}: algorithm.warmup_rounds: 6 leaves no round of full-model averaging" in capsys.readouterr().out


@pytest.mark.slow
def test_real_peers_run_the_warmup_and_match_the_simulation(tmp_path, capsys):
    """Three peer processes on loopback: the same switch, statistics and bytes as simulated."""
    from tests.peer_support import SCENARIO
    from tests.peer_support import TINY as PEERS

    sets = [*PEERS, "algorithm.name=fedpews", "algorithm.warmup_rounds=2"]
    code = main(["launch", str(SCENARIO), "--peers", "3", "--out", str(tmp_path / "launch"), "--insecure",
                 "--round-timeout", "30", *sum((["--set", s] for s in sets), [])])
    assert code == 0, capsys.readouterr().err
    real = json.loads((tmp_path / "launch" / "summary.json").read_text())
    # peers without CURVE keys sign nothing: the simulation of the same unauthenticated network
    sim = run_scenario(load_scenario(SCENARIO, [*sets, "security.sign_artifacts=false"]), progress=False)
    assert real["algorithm_stats"]["phase_switches"] == sim["algorithm_stats"]["phase_switches"] == 1
    assert real["algorithm_stats"]["warmup_rounds_done"] == 2
    assert real["comm"]["bytes_sent_total"] == pytest.approx(sim["comm"]["bytes_sent_total"], rel=0.01)
