"""Attack success, from each device's own view at the end of a run (``summary.json``
``adversaries``): how well the honest devices still recognise the attacked class, and how many
of them a liar got into a cluster with (FedSub's clusterings).

A device's view is taken where the device is (``device_view``: in the simulators at the end of
the run, on a real peer into its ``peer.json``), and judged where the scenario says who lied
(``attack_success``), so a lying peer cannot report its way out."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from p2pfed.algorithms.attacks import Attack
from p2pfed.algorithms.base import Algorithm
from p2pfed.learning.training import per_class_accuracy


def device_view(algorithm: Algorithm) -> dict[str, Any]:
    """Per class, the recall of the model this device is scored on, over its test data (None for
    a class it has no test sample of), and per class the peers it shared a cluster with (methods
    that cluster, i.e. that have ``cluster_mates``; None otherwise)."""
    ctx = algorithm.ctx
    with torch.no_grad():
        recall = per_class_accuracy(algorithm.evaluated_model(), ctx.x_test, ctx.y_test, ctx.num_classes)
    mates = getattr(algorithm, "cluster_mates", None)
    return {"class_recall": [None if math.isnan(r) else round(float(r), 6) for r in recall],
            "cluster_mates": {str(c): list(m) for c, m in mates().items()} if callable(mates) else None}


def attacked_classes(attacks: Mapping[int, Attack]) -> list[int]:
    """The classes a targeted attack aims at: label-flip's source, subnetwork-poison's target."""
    out = set()
    for a in attacks.values():
        if "label-flip" in a.kinds and a.source_class is not None:
            out.add(a.source_class)
        if "subnetwork-poison" in a.kinds and a.target_class is not None:
            out.add(a.target_class)
    return sorted(out)


def attack_success(views: Mapping[int, Mapping[str, Any]], attacks: Mapping[int, Attack]) -> dict[str, Any]:
    """The honest devices' mean recall of each attacked class, and the fraction of the honest
    devices' class clusters (their last clustering of each class) that held a liar; the same
    for the victims that prototype-shift attacks name."""
    honest = {d: v for d, v in views.items() if d not in attacks}
    out: dict[str, Any] = {}
    for c in attacked_classes(attacks):
        values = [v["class_recall"][c] for v in honest.values() if v["class_recall"][c] is not None]
        out[f"honest_recall_class_{c}_mean"] = round(sum(values) / len(values), 6) if values else None
    victims = {a.victim for a in attacks.values() if a.victim is not None}
    for key, devices in (("honest", honest), ("victim", {d: v for d, v in honest.items() if d in victims})):
        clusters = [mates for v in devices.values() if v.get("cluster_mates") is not None
                    for mates in v["cluster_mates"].values()]
        if clusters:
            infiltrated = sum(any(m in attacks for m in mates) for mates in clusters)
            out[f"{key}_clusters_with_adversary_fraction"] = round(infiltrated / len(clusters), 6)
    return out
