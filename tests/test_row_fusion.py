"""FedSub's fusion in row form (``learning/row_fusion.py``, what FedSub runs) against the
parameter-level Eq. 6-10 of ``learning/fusion.py`` (the reference, written as the paper states it)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_fusion import FUSIONS, combine_cluster_updates
from p2pfed.learning.model import MLP
from p2pfed.algorithms.fedsub.row_fusion import ClassCluster, row_fusion_job, row_weights
from p2pfed.algorithms.fedsub.subnetworks import parameter_masks
from p2pfed.learning.units import unit_layers


def fuse_rows(own, members, clusters, rule, layers):
    """The row-form job run on a copy of ``own``: the device's parameters after the fusion."""
    targets = {n: t.clone() for n, t in own.items()}
    job = row_fusion_job(targets, members, clusters, rule, layers)
    if job is not None:
        job.run()
    return targets


def reference(own, members, clusters, rule, model):
    """Per class: the paper's fusion rule on parameter-sized masks; then Eq. 7/10."""
    updates = []
    for cl in clusters:
        values = [members[m] for m in cl.members]
        bounds = np.cumsum([layer.out_features for layer in model.layers])[:-1]
        masks = [parameter_masks(model, np.split(row, bounds)) for row in cl.units]
        updates.append(FUSIONS[rule](values, masks, cl.scores))
    return combine_cluster_updates(own, updates)[0]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), rule=st.sampled_from(sorted(FUSIONS)),
       num_members=st.integers(1, 6), num_classes=st.integers(0, 5),
       zero_scores=st.booleans())
def test_row_fusion_equals_the_parameter_level_rules(seed, rule, num_members, num_classes, zero_scores):
    rng = np.random.default_rng(seed)
    model = MLP(5, [7, 4], 3)
    sizes = [layer.out_features for layer in model.layers]

    def params():
        return {n: torch.from_numpy(rng.normal(size=tuple(p.shape)).astype(np.float32))
                for n, p in model.named_parameters()}

    own, members = params(), [params() for _ in range(num_members)]
    clusters = []
    for _ in range(num_classes):
        k = int(rng.integers(1, num_members + 1))
        chosen = sorted(rng.choice(num_members, size=k, replace=False).tolist())
        units = rng.random((k, sum(sizes))) < 0.6
        scores = [0.0] * k if zero_scores else rng.uniform(0, 5, size=k).round(1).tolist()
        clusters.append(ClassCluster(members=chosen, units=units, scores=scores))
    got = fuse_rows(own, members, clusters, rule, unit_layers(model))
    want = reference(own, members, clusters, rule, model)
    for name in own:
        torch.testing.assert_close(got[name], want[name], rtol=1e-6, atol=1e-6)


def test_leadership_ties_go_to_the_first_member_and_overlap_needs_every_member():
    units = np.array([[True, True, False], [True, False, True]])
    weights, held = row_weights("leadership", units, [2.0, 2.0])
    assert held.tolist() == [True, True, False] and weights[1].sum() == 0
    weights, held = row_weights("overlap", units, [1.0, 3.0])
    assert held.tolist() == [True, False, False]
    assert weights[:, 0].tolist() == pytest.approx([1 / 4, 3 / 4]) and weights[:, 1:].sum() == 0
    with pytest.raises(ValueError, match="unknown fusion rule"):
        row_weights("median", units, [1.0, 1.0])
