"""Turning a run spec into the objects a runtime drives and changes: models, algorithms, who lies.

Shared by the simulation and the real-peer runtime so both build devices the same way. What a
run only reads (the federation, the graph, the contacts) the spec builds and keeps itself.
"""

from __future__ import annotations

from dataclasses import replace

from torch import nn

from p2pfed.algorithms import Algorithm, DeviceContext, Offload
from p2pfed.algorithms.attacks import Attack, adversarial
from p2pfed.data import DeviceData, FederatedDataset
from p2pfed.data.dynamic import ClassSchedule, draw_class_schedule
from p2pfed.learning.generalization import PooledTestData
from p2pfed.learning.model import build_model, build_user_model
from p2pfed.learning.training import TrainingConfig
from p2pfed.scenario.spec import RunSpec
from p2pfed.scenario.errors import ScenarioError
from p2pfed.scenario.contacts import partners
from p2pfed.scenario.randomness import int_seed, stream, torch_stream


def build_device_model(loaded: RunSpec, num_features: int, num_classes: int) -> nn.Module:
    """The scenario's model (``model.name``) with the initial weights every device starts from
    (drawn from the scenario seed), as a server's first broadcast would give them."""
    sc = loaded.scenario
    seed = int_seed(sc.seed, "model-init")
    if loaded.model_factory is None:
        return build_model(num_features, num_classes, sc.model.hidden, seed=seed, unit_gates=sc.model.unit_gates)
    return build_user_model(loaded.model_factory, sc.model.name, num_features, num_classes, seed, sc.model.options)


def build_algorithm(loaded: RunSpec, dataset: FederatedDataset, device_id: int,
                    shared: dict | None = None, device: DeviceData | None = None,
                    pooled_test: PooledTestData | None = None, offload: Offload | None = None) -> Algorithm:
    """The scenario's method for one device, on the scenario's model.

    ``device`` replaces the dataset's device ``device_id`` (a real peer's own data); it must fit
    the federation's model (same features and classes). With ``evaluation.generalization`` the
    device is also scored on the other devices' test data (``pooled_test``, built from the dataset
    if not given; pass one to share it between devices). ``shared``: the runtime-wide memo
    tables, ``offload``: where methods may send work (see ``Offload``)."""
    sc = loaded.scenario
    device = dataset.devices[device_id] if device is None else device
    shared = shared if shared is not None else {}
    attack = None
    if sc.adversaries:   # chosen once per runtime, in the runtime-wide memo
        if "adversaries" not in shared:
            shared["adversaries"] = adversary_map(loaded, len(dataset.devices), dataset.num_classes)
        attack = shared["adversaries"].get(device_id)
    if attack is not None and "label-flip" in attack.kinds:
        device = replace(device, y_train=attack.flipped(device.y_train, dataset.num_classes))
    model = build_device_model(loaded, dataset.num_features, dataset.num_classes)
    ctx = DeviceContext(device=device, num_classes=dataset.num_classes, model=model,
                        training=TrainingConfig(**sc.training.model_dump()),
                        rng=stream(sc.seed, "device", device_id),
                        torch_generator=torch_stream(sc.seed, "device", device_id), rounds=sc.device_rounds(),
                        model_rng=torch_stream(sc.seed, "device-model", device_id), model_name=sc.model.name,
                        shared=shared,
                        model_seed=int_seed(sc.seed, "model-init"),
                        hide_test_classes=sc.dynamic.test_classes == "visible")
    if offload is not None:
        ctx.offload = offload
    if sc.evaluation.generalization:
        pool = pooled_test if pooled_test is not None else pooled_test_data(dataset)
        ctx.generalization_data = lambda: pool.others(device_id)
    cls = loaded.method
    if attack is not None:
        try:
            cls = adversarial(cls, attack, int_seed(sc.seed, "attack", device_id))
        except ValueError as e:
            raise ScenarioError([f"{loaded.source}: adversaries: {e}"]) from None
    return cls(ctx, loaded.options)


def adversary_map(loaded: RunSpec, num_devices: int, num_classes: int) -> dict[int, Attack]:
    """Which devices lie, and how: the scenario's ``adversaries`` entries in order, each naming
    devices or drawing its fraction (rounded, at least one) from the devices not yet chosen, with
    the scenario's seed. Raises ScenarioError naming an entry whose ids are out of range."""
    chosen: dict[int, Attack] = {}
    rng = stream(loaded.scenario.seed, "adversaries")
    for i, spec in enumerate(loaded.scenario.adversaries):
        attack = Attack(spec.kinds, spec.start_round, spec.factor, spec.noise_std, spec.source_class, spec.target_class,
                        spec.shift, spec.toward, spec.victim, z=spec.z, epsilon=spec.epsilon,
                        deviation=spec.deviation,
                        custom=tuple((k, loaded.attacks[k]) for k in spec.kinds if k in loaded.attacks),
                        options=dict(spec.options))
        if spec.victim is not None and spec.victim >= num_devices:
            raise ScenarioError([f"{loaded.source}: adversaries.{i}.victim: {spec.victim} is not a device "
                                 f"(the scenario has 0..{num_devices - 1})"])
        for key in ("source_class", "target_class"):
            if (value := getattr(spec, key)) is not None and value >= num_classes:
                raise ScenarioError([f"{loaded.source}: adversaries.{i}.{key}: {value} is not a class "
                                     f"(the scenario has 0..{num_classes - 1})"])
        if spec.devices is not None:
            bad = [d for d in spec.devices if d >= num_devices]
            if bad:
                raise ScenarioError([f"{loaded.source}: adversaries.{i}.devices: {bad} are not devices "
                                     f"(the scenario has 0..{num_devices - 1})"])
            ids = spec.devices
        else:
            assert spec.fraction is not None   # the schema requires one of the two
            free = [d for d in range(num_devices) if d not in chosen]
            count = min(len(free), max(1, round(spec.fraction * num_devices)))
            ids = sorted(int(d) for d in rng.choice(free, size=count, replace=False))
        attack = replace(attack, liar_share=len(ids) / num_devices)
        for d in ids:
            if "sybil" in attack.kinds:   # each sybil speaks for its own draw of the other devices
                others = [x for x in range(num_devices) if x != d]
                stolen = rng.choice(others, size=min(spec.identities, len(others)), replace=False)
                chosen[d] = replace(attack, identities=tuple(sorted(int(x) for x in stolen)))
            else:
                chosen[d] = attack
    return chosen


def peer_neighbours(loaded: RunSpec) -> tuple[list[list[int]], int]:
    """Each device's neighbours as a real peer — its topology neighbours, or over contacts every
    device it meets within the run — and how many links that makes."""
    if loaded.scenario.contacts.kind in ("none", "static"):
        graph = loaded.graph
        return [sorted(graph.neighbors(i)) for i in range(loaded.num_devices)], graph.number_of_edges()
    plan, duration = loaded.contacts
    met = partners(plan, duration)
    return met, sum(map(len, met)) // 2


def build_algorithms(loaded: RunSpec, dataset: FederatedDataset | None = None, *, shared: dict | None = None,
                     offload: Offload | None = None) -> list[Algorithm]:
    """Every device's method, on the spec's federation (or ``dataset``'s devices); ``shared``: the
    runtime-wide memo tables they share (new if None); ``offload``: where they may send work (the
    runtime's)."""
    dataset = loaded.federation if dataset is None else dataset
    shared = {} if shared is None else shared
    pool = pooled_test_data(dataset) if loaded.scenario.evaluation.generalization else None
    return [build_algorithm(loaded, dataset, i, shared, pooled_test=pool, offload=offload)
            for i in range(len(dataset.devices))]


def pooled_test_data(dataset: FederatedDataset) -> PooledTestData:
    """Every device's test split in one pool (``evaluation.generalization``)."""
    return PooledTestData([d.device_id for d in dataset.devices], [d.x_test for d in dataset.devices],
                          [d.y_test for d in dataset.devices])


def build_class_schedule(loaded: RunSpec, dataset: FederatedDataset | None = None) -> ClassSchedule | None:
    """The scenario's dynamic-data schedule (None: static data) over the spec's federation (or
    ``dataset``'s devices), drawn from its own seed stream."""
    dyn = loaded.scenario.dynamic
    if dyn.devices_fraction == 0:
        return None
    dataset = loaded.federation if dataset is None else dataset
    return draw_class_schedule([d.y_train for d in dataset.devices], devices_fraction=dyn.devices_fraction,
                               max_removed_fraction=dyn.max_removed_fraction, return_every=dyn.return_every,
                               rng=stream(loaded.scenario.seed, "class-schedule"))
