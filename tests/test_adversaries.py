"""Peers that lie (issue 32): each attack does what it says to what a device trains and shares, the
honest devices' F1 is reported apart, and a robust fusion recovers what an attack took."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from p2pfed.algorithms.base import Payload
from p2pfed.engine.runner import run_scenario
from p2pfed.scenario.build import adversary_map, build_algorithm
from p2pfed.scenario.loader import load_scenario
from p2pfed.scenario.errors import ScenarioError

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "synthetic-small.yaml"
GOSSIP = ["algorithm.name=gossip-avg", "rounds=10"]


def _device(adversaries: str, device: int = 2):
    loaded = load_scenario(SCENARIO, [*GOSSIP, f"adversaries={adversaries}"])
    dataset = loaded.federation
    return build_algorithm(loaded, dataset, device), dataset


def test_each_attack_changes_only_what_it_should():
    honest, dataset = _device("[]")
    flipped, _ = _device("[{kind: label-flip, devices: [2]}]")
    assert np.array_equal(flipped.ctx.device.y_train, dataset.num_classes - 1 - dataset.devices[2].y_train)
    one, _ = _device("[{kind: label-flip, devices: [2], source_class: 0, target_class: 1}]")
    assert set(one.ctx.device.y_train[dataset.devices[2].y_train == 0]) == {1}
    flipped_sign, _ = _device("[{kind: sign-flip, devices: [2], factor: 2}]")
    mine, theirs = honest.share(0), flipped_sign.share(0)
    assert isinstance(mine, Payload) and isinstance(theirs, Payload)
    for name, array in mine.tensors.items():
        expected = -2 * array if np.issubdtype(array.dtype, np.floating) else array
        assert np.allclose(theirs.tensors[name], expected)
    noisy, _ = _device("[{kind: noise, devices: [2], noise_std: 0.5}]")
    state = noisy.state_dict()
    first = noisy.share(0).tensors
    noisy.load_state_dict(state)                 # its noise stream is checkpointed: the same draw again
    assert all(np.array_equal(first[k], v) for k, v in noisy.share(0).tensors.items())
    assert any(not np.allclose(first[k], v) for k, v in mine.tensors.items())
    free, _ = _device("[{kind: free-ride, devices: [2], start_round: 3}]")
    assert free.train(2) is not None and free.train(3) is None
    bystander, _ = _device("[{kind: sign-flip, devices: [5]}]", device=2)   # another device lies
    assert all(np.array_equal(bystander.share(0).tensors[k], v) for k, v in mine.tensors.items())


def test_who_lies_is_drawn_from_the_seed_and_bad_ids_are_refused():
    loaded = load_scenario(SCENARIO, [*GOSSIP, "adversaries=[{kind: noise, fraction: 0.25}, "
                                      "{kind: free-ride, devices: [0]}]"])
    chosen = adversary_map(loaded, 12, 4)
    assert chosen == adversary_map(loaded, 12, 4) and len(chosen) in (3, 4)
    assert chosen[0].kind == "free-ride" and sum(a.kind == "noise" for a in chosen.values()) >= 2
    with pytest.raises(ScenarioError, match=r"adversaries\.0\.devices: \[12\]"):
        adversary_map(load_scenario(SCENARIO, [*GOSSIP, "adversaries=[{kind: noise, devices: [12]}]"]), 12, 4)
    with pytest.raises(ScenarioError, match="adversaries"):
        load_scenario(SCENARIO, [*GOSSIP, "adversaries=[{kind: noise, devices: [1], fraction: 0.2}]"])


def _honest_f1(robust: str, adversaries: str, *options: str, drops: dict | None = None) -> float:
    summary = run_scenario(load_scenario(SCENARIO, [*GOSSIP, f"algorithm.robust={robust}", *options,
                                                    f"adversaries={adversaries}"]), progress=False)
    assert summary is not None
    if drops is not None:
        drops.update(summary["comm"]["drop_reasons"])
    if adversaries == "[]":
        return summary["final"]["f1_macro_mean"]
    assert summary["adversaries"]["honest_devices"] == 9
    return summary["adversaries"]["honest_f1_mean"]


def test_sign_flipping_peers_break_gossip_averaging_and_the_median_recovers_it():
    """Three of twelve devices send their model times -3: the honest devices' F1 collapses under the
    weighted mean and comes back to the no-attack level under the coordinate-wise median."""
    attack = "[{kind: sign-flip, fraction: 0.25, factor: 3}]"
    clean = _honest_f1("none", "[]")
    attacked = _honest_f1("none", attack)
    defended = _honest_f1("median", attack)
    assert attacked < clean - 0.25
    assert defended > clean - 0.05
    # multi-Krum, tolerating 3 liars and averaging the 9 best-scored models, holds too
    assert _honest_f1("krum", attack, "algorithm.byzantine=3", "algorithm.krum_select=9") > clean - 0.05


def test_scaled_models_drive_gossip_to_nan_the_run_goes_on_and_clipping_bounds_them():
    """Three devices send their model times 10: under the weighted mean every model ends NaN — the
    run still finishes, each device's unsendable share counted as a drop — and clipping every
    peer's difference to norm 1 keeps the honest devices at the no-attack level."""
    attack = "[{kind: scale, fraction: 0.25, factor: 10}]"
    clean = _honest_f1("none", "[]")
    drops: dict = {}
    assert _honest_f1("none", attack, drops=drops) < clean - 0.25
    assert drops.get("share:not-finite", 0) > 0
    assert _honest_f1("clip", attack, "algorithm.clip_norm=1") > clean - 0.05


@pytest.mark.slow   # in the slow set .ci/run also runs
def test_real_peers_with_one_attacking_peer_give_the_simulators_honest_f1(tmp_path, capsys):
    """Three peers launched on loopback, peer 1 adding noise to what it shares (its scenario says so,
    as a bundle's would): the honest peers' F1 is the simulator's."""
    from p2pfed.cli.main import main
    sets = ["dataset.synthetic.num_devices=3", "dataset.synthetic.samples_per_class=12", "model.hidden=[8,16]",
            "rounds=3", "algorithm.name=gossip-avg", "adversaries=[{kind: noise, devices: [1], noise_std: 0.5}]"]
    out = tmp_path / "launch"
    code = main(["launch", str(SCENARIO), "--out", str(out), "--insecure", "--round-timeout", "20",
                 *sum((["--set", s] for s in sets), [])])
    assert code == 0, capsys.readouterr().err
    real = json.loads((out / "summary.json").read_text())["adversaries"]
    sim = run_scenario(load_scenario(SCENARIO, sets), progress=False)
    assert sim is not None
    assert real["devices"] == sim["adversaries"]["devices"] == {"1": "noise"}
    assert real["honest_devices"] == 2
    assert abs(real["honest_f1_mean"] - sim["adversaries"]["honest_f1_mean"]) <= 0.02


def test_robust_rules_on_planted_rows():
    """Seven honest models near 1, three liars far away: every rule lands near the honest ones,
    the weighted mean does not; clipping moves the own model by at most clip_norm per liar share."""
    from p2pfed.learning.robust_fusion import combine, krum_choice
    rng = np.random.default_rng(0)
    honest = 1.0 + 0.01 * rng.standard_normal((7, 5))
    liars = np.full((3, 5), -30.0)
    rows, weights = np.vstack([honest, liars]), np.ones(10)
    assert abs(np.average(rows, axis=0, weights=weights).mean() - 1.0) > 5
    assert set(krum_choice(rows, byzantine=3, select=7)) == set(range(7))
    for rule, kwargs in [("median", {}), ("trimmed-mean", {"trim_fraction": 0.35}), ("krum", {"byzantine": 3}),
                         ("krum", {"byzantine": 3, "select": 7})]:
        assert np.allclose(combine(rows, weights, rule, **kwargs), 1.0, atol=0.05), (rule, kwargs)
    clipped = combine(rows, weights, "clip", clip_norm=0.5)
    assert np.linalg.norm(clipped - rows[0]) <= 0.5 * 3 / 10 + 0.05


FEDSUB = ["algorithm.name=fedsub"]


def _fedsub_device(adversaries: str, device: int = 0):
    loaded = load_scenario(SCENARIO, [*FEDSUB, f"adversaries={adversaries}"])
    dataset = loaded.federation
    return build_algorithm(loaded, dataset, device)


def _parts(shares: list[Payload]) -> dict[str, Payload]:
    return {p.meta["part"]: p for p in shares}


def test_fedsub_attacks_poison_only_their_part():
    """Model attacks leave FedSub's prototypes alone and flip its rows; subnetwork poisoning flips
    only the rows of its class's own units; a prototype shifted toward a class becomes it."""
    honest = _parts(_fedsub_device("[]").share(0))
    flipped = _parts(_fedsub_device("[{kind: sign-flip, devices: [0], factor: 2}]").share(0))
    assert np.array_equal(flipped["prototypes"].tensors["prototypes"], honest["prototypes"].tensors["prototypes"])
    assert np.allclose(flipped["subnetworks"].tensors["layers.0.weight"],
                       -2 * honest["subnetworks"].tensors["layers.0.weight"])
    poisoned = _parts(_fedsub_device("[{kind: subnetwork-poison, devices: [0], target_class: 1}]").share(0))
    sub, mine = poisoned["subnetworks"], honest["subnetworks"]
    classes, sizes = sub.meta["classes"], [32, 64, 4]
    bits = np.unpackbits(mine.tensors["units"], axis=1, count=sum(sizes)).astype(bool)
    own = bits[classes.index(1)] & ~np.delete(bits, classes.index(1), axis=0).any(axis=0)
    assert own.any()
    sent = own[:32][bits.any(axis=0)[:32]]   # the first layer's sent rows that only class 1 uses
    w, w0 = sub.tensors["layers.0.weight"], mine.tensors["layers.0.weight"]
    assert np.allclose(w[sent], -w0[sent]) and np.array_equal(w[~sent], w0[~sent])
    assert np.array_equal(sub.tensors["units"], mine.tensors["units"])
    shifted = _parts(_fedsub_device("[{kind: prototype-shift, devices: [0], toward: class, target_class: 2}]")
                     .share(0))["prototypes"]
    protos, at = shifted.tensors["prototypes"], shifted.meta["classes"].index(2)
    assert np.allclose(protos, protos[at][None])
    assert np.allclose(protos[at], honest["prototypes"].tensors["prototypes"][at])


def test_attack_entries_that_cannot_work_are_refused_by_field():
    for entry, field in [("{kind: subnetwork-poison, devices: [0]}", "target_class"),
                         ("{kind: prototype-shift, devices: [0], victim: 3}", "victim"),
                         ("{kind: [noise, noise], devices: [0]}", "distinct"),
                         ("{kind: noise, devices: [0], target_class: 1}", "target_class")]:
        with pytest.raises(ScenarioError, match=field):
            load_scenario(SCENARIO, [*FEDSUB, f"adversaries=[{entry}]"])
    with pytest.raises(ScenarioError, match=r"adversaries\.0\.victim: 40"):
        adversary_map(load_scenario(SCENARIO, [*FEDSUB, "adversaries=[{kind: prototype-shift, devices: [0], "
                                                        "toward: device, victim: 40}]"]), 12, 4)
    with pytest.raises(ScenarioError, match="subnetwork-poison needs a method that shares class subnetworks"):
        _device("[{kind: subnetwork-poison, devices: [2], target_class: 1}]")


def test_a_resolved_scenario_with_liars_loads_again_as_a_bundle_writes_it(tmp_path):
    """``dump`` spells every adversary field, those of other attacks at their defaults, as a
    bundle's ``scenario.yaml`` does: it loads again, and another attack's field set away from
    its default is still refused."""
    import yaml
    from p2pfed.scenario.loader import dump
    sybil = [*GOSSIP, "forwarding.enabled=true", "forwarding.parts=[whole]", "contacts.kind=poisson",
             "adversaries=[{kind: [sign-flip, sybil], devices: [0], factor: 3, identities: 2}]"]
    data = dump(load_scenario(SCENARIO, sybil))
    resolved = tmp_path / "scenario.yaml"
    resolved.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_scenario(resolved).scenario.adversaries == load_scenario(SCENARIO, sybil).scenario.adversaries
    for key, value in (("z", 1.5), ("epsilon", 0.5), ("deviation", "sign")):
        resolved.write_text(yaml.safe_dump({**data, "adversaries": [{**data["adversaries"][0], key: value}]}))
        with pytest.raises(ScenarioError, match=f"{key} is .*'s, not sign-flip\\+sybil's"):
            load_scenario(resolved)


def test_robust_class_rows_follow_the_honest_mates_and_count_what_they_set_aside():
    """One class, four mates (this device first) holding the same rows, one of them a liar whose
    rows are -50: the median and Krum give the honest rows, the weighted mean would not, and the
    counts say how many peer rows Krum left out."""
    import torch
    from p2pfed.algorithms.fedsub.robust_rows import RobustCount, robust_class_rows
    from p2pfed.learning.units import UnitLayer
    width = 4
    layers = [UnitLayer(3, ("layers.0.weight", "layers.0.bias"), ((width,), ())),
              UnitLayer(2, ("layers.1.weight", "layers.1.bias"), ((3,), ()))]
    rng = np.random.default_rng(1)

    def model(value: float) -> dict[str, torch.Tensor]:
        jitter = 0.01 * torch.as_tensor(rng.standard_normal((3, width))).float()
        return {"layers.0.weight": torch.full((3, width), value) + jitter,
                "layers.0.bias": torch.full((3,), value), "layers.1.weight": torch.full((2, 3), value),
                "layers.1.bias": torch.full((2,), value)}
    mates = [model(1.0), model(1.0), model(1.0), model(-50.0)]
    units = np.array([[True, True, False, True, False]] * 4)
    for rule, extra in [("median", {}), ("krum", {"byzantine": 1, "select": 1})]:
        count = RobustCount()
        update, rows = robust_class_rows(mates[0], mates, 0, units, [1.0] * 4, "overlap", layers, rule, count, **extra)
        assert rows.tolist() == [True, True, False, True, False]
        assert torch.allclose(update["layers.0.weight"][:2], torch.ones(2, width), atol=0.05), rule
        assert float(update["layers.0.weight"][2].abs().sum()) == 0.0   # not a fused row: left to the targets
        assert torch.allclose(update["layers.1.bias"][0], torch.tensor(1.0))
        assert count.groups == 1 and count.candidates == 4
        assert count.set_aside == (3 if rule == "krum" else 0)


def _fedsub_summary(*sets: str) -> dict:
    summary = run_scenario(load_scenario(SCENARIO, [*FEDSUB, *sets]), progress=False)
    assert summary is not None
    return summary


@pytest.mark.slow   # in the slow set .ci/run also runs
def test_subnetwork_poisoning_takes_its_class_and_the_median_gives_it_back():
    """Three of twelve FedSub devices flip the rows of class 0's own units: the honest devices'
    recall of class 0 falls; FedSub's row fusion by the median gives it back (the defence's own
    count shows it ran), at the F1 of a run without liars."""
    attack = "adversaries=[{kind: subnetwork-poison, fraction: 0.25, target_class: 0}]"
    clean = _fedsub_summary()["final"]["f1_macro_mean"]
    attacked = _fedsub_summary(attack)["adversaries"]
    defended_run = _fedsub_summary(attack, "algorithm.robust=median")
    defended = defended_run["adversaries"]
    assert attacked["honest_recall_class_0_mean"] < defended["honest_recall_class_0_mean"] - 0.3
    assert defended["honest_f1_mean"] > clean - 0.05
    assert defended_run["algorithm_stats"]["robust_row_groups"] > 0


@pytest.mark.slow   # in the slow set .ci/run also runs
def test_a_prototype_copied_from_its_victim_puts_the_liar_in_every_victim_cluster():
    """Device 0 sends device 6's prototypes as its own: device 6 then clusters with it for every
    class, where it clustered with it for none while device 0's prototypes stayed (almost) its own."""
    def victim_share(shift: float) -> float:
        entry = f"{{kind: prototype-shift, devices: [0], toward: device, victim: 6, shift: {shift}}}"
        return _fedsub_summary(f"adversaries=[{entry}]")["adversaries"]["victim_clusters_with_adversary_fraction"]
    assert victim_share(0.001) <= 0.25
    assert victim_share(1.0) == 1.0


def test_gossip_robust_fusion_reports_what_it_set_aside():
    """The defence is seen acting in summary.json: Krum (one model chosen of the own and the
    peers') sets most peer models aside every fusion; the weighted mean reports nothing."""
    sets = [*GOSSIP, "rounds=3", "adversaries=[{kind: sign-flip, fraction: 0.25, factor: 3}]"]
    krum = run_scenario(load_scenario(SCENARIO, [*sets, "algorithm.robust=krum"]), progress=False)
    plain = run_scenario(load_scenario(SCENARIO, sets), progress=False)
    assert krum is not None and plain is not None
    stats = krum["algorithm_stats"]
    assert stats["robust_fusions"] == 2   # rounds 1 and 2: nothing has arrived before round 0
    assert stats["robust_peer_models_set_aside_fraction"] > 0.9
    assert "robust_fusions" not in plain["algorithm_stats"]


@pytest.mark.slow   # in the slow set .ci/run also runs
def test_noise_one_class_flipping_and_free_riding_each_do_what_they_claim():
    """Gossip averaging, 10 rounds: three devices adding noise (σ 2) lower the honest F1, and
    clipping at norm 1 gives it back; three devices relabelling class 0 as 1 take the honest
    recall of class 0 well below what one such device does; three free-riders, never training,
    end far above chance (they get the federation's model for nothing: 0.39 against the honest
    devices' 0.55 on seed 3, a constant predictor scoring 0.1)."""
    clean = _honest_f1("none", "[]")
    noise = "[{kind: noise, fraction: 0.25, noise_std: 2}]"
    assert _honest_f1("none", noise) < clean - 0.05
    assert _honest_f1("clip", noise, "algorithm.clip_norm=1") > clean - 0.05

    def recall_of_0(fraction: float) -> float:
        entry = f"{{kind: label-flip, fraction: {fraction}, source_class: 0, target_class: 1}}"
        summary = run_scenario(load_scenario(SCENARIO, [*GOSSIP, f"adversaries=[{entry}]"]), progress=False)
        assert summary is not None
        return summary["adversaries"]["honest_recall_class_0_mean"]
    assert recall_of_0(0.25) < recall_of_0(0.01) - 0.15   # three liars against one
    free = run_scenario(load_scenario(SCENARIO, [*GOSSIP, "adversaries=[{kind: free-ride, fraction: 0.25}]"]),
                        progress=False)
    assert free is not None
    assert free["adversaries"]["adversary_f1_mean"] > 0.25


def test_masked_robust_combination_uses_only_the_holders_of_each_element():
    """Pruned sub-models: each element is combined over the models holding it; a liar holding an
    element with one honest peer and the own model is outvoted by the median there, and an
    element only the own model holds keeps its value."""
    from p2pfed.learning.robust_fusion import masked_combine
    values = np.array([[1.0, 2.0, 3.0], [1.1, 2.1, 0.0], [-90.0, 0.0, 0.0], [0.9, 0.0, 0.0]])
    holds = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0]], dtype=bool)
    out, left_out, offered = masked_combine(values, holds, np.ones(4), "median")
    assert np.allclose(out, [np.median([1.0, 1.1, -90.0, 0.9]), np.median([2.0, 2.1]), 3.0])
    assert (left_out, offered) == (0, 3 + 1)
    out, left_out, offered = masked_combine(values, holds, np.ones(4), "krum", byzantine=1, select=1)
    assert abs(out[0] - 1.0) <= 0.1 and left_out == 3 + 1


@pytest.mark.slow   # in the slow set .ci/run also runs
def test_safl_sign_flipping_peers_and_its_median_stage_two():
    """SAFL, 12 rounds: three devices sending their sub-model times -3 collapse every device; the
    median in stage two's aggregation keeps the honest devices far above it, and says it ran."""
    attack = "adversaries=[{kind: sign-flip, fraction: 0.25, factor: 3}]"
    base = ["algorithm.name=safl", "rounds=12", attack]
    attacked = run_scenario(load_scenario(SCENARIO, base), progress=False)
    defended = run_scenario(load_scenario(SCENARIO, [*base, "algorithm.robust=median"]), progress=False)
    assert attacked is not None and defended is not None
    assert defended["adversaries"]["honest_f1_mean"] > attacked["adversaries"]["honest_f1_mean"] + 0.3
    assert defended["algorithm_stats"]["robust_fusions"] > 0


@pytest.mark.slow   # in the slow set .ci/run also runs
def test_a_sybil_outvotes_the_median_on_contacts_only_where_artifacts_are_unsigned():
    """Contacts with forwarding: one device sending its model times -3 is outvoted by the
    median. The same device also sending it as copies "carried" for eight other devices: with
    artifacts signed (the default) every forged copy is refused as ``bad-signature`` and the
    median still holds; unsigned (a carried copy's origin taken on trust), it collapses the
    honest devices."""
    sets = [*GOSSIP, "contacts.kind=poisson", "contacts.duration_s=3600", "contacts.mean_intercontact_s=300",
            "contacts.mean_duration_s=60", "asynchronous.train_period_s=300", "forwarding.enabled=true",
            "forwarding.parts=[whole]", "evaluation.every_s=600", "algorithm.robust=median"]

    def run(adversaries: str, *more: str) -> dict:
        summary = run_scenario(load_scenario(SCENARIO, [*sets, *more, f"adversaries={adversaries}"]),
                               progress=False)
        assert summary is not None
        return summary
    clean = run("[]")["final"]["f1_macro_mean"]
    assert run("[{kind: sign-flip, devices: [0], factor: 3}]")["adversaries"]["honest_f1_mean"] > clean - 0.05
    sybil = "[{kind: [sign-flip, sybil], devices: [0], factor: 3, identities: 8}]"
    signed, unsigned = run(sybil), run(sybil, "security.sign_artifacts=false")
    assert signed["comm"]["drop_reasons"].get("bad-signature", 0) > 0
    assert signed["adversaries"]["honest_f1_mean"] > clean - 0.05
    assert "bad-signature" not in unsigned["comm"]["drop_reasons"]
    assert unsigned["adversaries"]["honest_f1_mean"] < clean - 0.25
    with pytest.raises(ScenarioError, match="forwarding.enabled"):
        load_scenario(SCENARIO, [*GOSSIP, "adversaries=[{kind: sybil, devices: [0]}]"])


@pytest.mark.slow   # in the slow set .ci/run also runs
def test_trimming_prototype_outliers_keeps_a_class_shifted_liar_out_of_the_clusters():
    """Three devices send every class prototype as their class 2's, with flipped rows: FedSub's
    min-size rule puts each such far-off point in some cluster; trimming prototype outliers
    leaves them out of far more honest clusters and keeps the honest F1 far higher. Without
    liars the rule trims nothing here, and the run is the same."""
    attack = ("adversaries=[{kind: [prototype-shift, sign-flip], fraction: 0.25, toward: class, "
              "target_class: 2}]")
    plain, trimmed = _fedsub_summary(attack), _fedsub_summary(attack, "algorithm.proto_outliers=trim")
    a, b = plain["adversaries"], trimmed["adversaries"]
    assert b["honest_clusters_with_adversary_fraction"] < a["honest_clusters_with_adversary_fraction"] - 0.15
    assert b["honest_f1_mean"] > a["honest_f1_mean"] + 0.2
    assert trimmed["algorithm_stats"]["prototype_outliers_per_clustering"] > 0
    clean, clean_trimmed = _fedsub_summary(), _fedsub_summary("algorithm.proto_outliers=trim")
    assert clean_trimmed["algorithm_stats"]["prototype_outliers_per_clustering"] == 0
    assert clean_trimmed["final"]["f1_macro_mean"] == clean["final"]["f1_macro_mean"]


def test_prototype_outliers_are_points_far_from_every_other():
    from p2pfed.algorithms.fedsub.outliers import inliers
    points = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [0.1, 0.1], [5.0, 5.0]])
    assert inliers(points, own=0, factor=3.0).tolist() == [True, True, True, True, False]
    assert inliers(points, own=4, factor=3.0).tolist() == [True] * 5       # the own prototype always stays
    assert inliers(points[:2], own=0, factor=3.0).all()                     # too few points to judge
