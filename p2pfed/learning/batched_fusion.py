"""Fusion as weighted sums of parameter rows, one device at a time or many devices at once.

Every method that fuses parameters replaces some of them by weighted sums of the same parameters
of its *members* (its own model and the peers' decoded artifacts): gossip averaging weighs each
member once, FedSub weighs each member's every row apart (Eq. 6-10, ``row_fusion``). A
``FusionJob`` is such a fusion for one device; ``job.run()`` computes it alone (the reference,
in float64), ``run_fusion_jobs`` computes the jobs of devices that fuse at the same instant
together.

Together pays when members are shared: in a synchronous round every receiver of a broadcast holds
the same decoded arrays, so for a parameter whose member weights are equal on every row, all the
devices' sums are one matrix product, (devices × shared members) @ (shared members × values),
plus each device's own weight times its own value. On the quickstart (36 devices, 6 neighbours
each) that cut gossip averaging's fusion from ~18 to ~6 ms a round, and on a complete graph of
36 devices from ~80 to ~10 ms. The product is chosen only where it does at most
``DENSE_WORK_FACTOR`` times the multiply-adds the jobs need — a dense product runs about that
much faster per multiply-add than one pass per member, measured — so a sparse graph of thousands
of devices (each with a handful of members out of thousands) keeps one job at a time. The product
runs in the parameters' dtype (float32): converting every member to float64 first cost more than
the product itself on this memory-bound machine; it differs from the float64 path by a few units
in the last place, which a test bounds.

A member may hold only some rows of a parameter (``SomeRows``: a peer's subnetwork, as it
arrived): a job rebuilds its dense form in one reused buffer as it sums, so no zero-filled copy
of a received message is kept.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch

Source = torch.Tensor | np.ndarray
DENSE_WORK_FACTOR = 16
STACK_BELOW = 4096   # parameters smaller than this are fused as one stacked reduction (``FusionJob.run``)


@contextmanager
def _reading_arrays() -> Iterator[None]:
    """Decoded arrays are read-only views, only read here: torch's warning about wrapping a
    read-only array is noise."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        yield


class SomeRows(Mapping[str, torch.Tensor]):
    """A member that holds only some rows of each parameter, zero elsewhere (a subnetwork sent
    by a peer): the rows' values, compact, and which rows they are. Reading a parameter by name
    gives its dense form, built on demand and kept only below ``STACK_BELOW`` values; a fusion
    rebuilds a large parameter's in a buffer it reuses across members. So a received subnetwork
    is never held twice (its message and a dense copy), and the sums are those over a dense
    copy, bit for bit."""

    def __init__(self, compact: Mapping[str, Source], rows: Mapping[str, np.ndarray | None],
                 shapes: Mapping[str, tuple[int, ...]]) -> None:
        """``compact[name]``: the rows held, in order; ``rows[name]``: a boolean mask over the
        parameter's first dimension, or None for every row; ``shapes[name]``: the full shape."""
        with _reading_arrays():
            self.compact = {name: _as_tensor(values) for name, values in compact.items()}
        held: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}   # per mask: (its rows, the others)
        for mask in rows.values():
            if mask is not None and id(mask) not in held:   # a layer's parameters share one mask
                held[id(mask)] = (torch.from_numpy(np.flatnonzero(mask)), torch.from_numpy(np.flatnonzero(~mask)))
        self.rows = {name: None if mask is None else held[id(mask)][0] for name, mask in rows.items()}
        self.absent = {name: held[id(mask)][1] for name, mask in rows.items() if mask is not None}
        self.shapes = dict(shapes)
        self._small: dict[str, torch.Tensor] = {}

    def __getitem__(self, name: str) -> torch.Tensor:
        values, rows = self.compact[name], self.rows[name]
        if rows is None:
            return values
        dense = self._small.get(name)
        if dense is None:
            dense = values.new_zeros(self.shapes[name])
            dense[rows] = values
            if dense.numel() < STACK_BELOW:   # small: kept, read by every receiver's stacked sum
                self._small[name] = dense
        return dense

    def __iter__(self) -> Iterator[str]:
        return iter(self.compact)

    def __len__(self) -> int:
        return len(self.compact)


def _add_member(acc: torch.Tensor, weight: torch.Tensor, member: Mapping[str, Source], name: str,
                scratch: dict[str, torch.Tensor]) -> None:
    """``acc += weight · member[name]``. A ``SomeRows`` member's dense form is rebuilt in
    ``scratch`` (one buffer per parameter, reused across members): its rows copied in, the rest
    zeroed; so the sum is the same ``addcmul_`` as over a kept dense copy, bit for bit."""
    rows = member.rows[name] if isinstance(member, SomeRows) else None
    if rows is None:
        acc.addcmul_(weight, _as_tensor(member[name]))
        return
    some = cast(SomeRows, member)
    values = some.compact[name]
    dense = scratch.get(name)
    if dense is None or dense.dtype != values.dtype:
        dense = scratch[name] = values.new_empty(some.shapes[name])
    dense.index_copy_(0, rows, values)
    dense.index_fill_(0, some.absent[name], 0.0)
    acc.addcmul_(weight, dense)


def _as_tensor(value: Source) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach() if value.requires_grad else value
    return torch.from_numpy(np.asarray(value))


@dataclass
class FusionJob:
    """``targets[name] ← Σ_m coef[name][m] · members[m][name]`` for every name in ``coef``.

    ``coef[name]`` is (members,) — one weight per member — or (members, rows) — a weight per
    member and row along the parameter's first dimension (a weight row and its bias share one).
    Members with weight 0 are not read. ``then`` runs after the new values are in place (work a
    method does on the fused model). ``prep_flops``: the arithmetic the method spent making this
    job (e.g. FedSub's clustering), counted with the sums where devices model their compute."""

    targets: dict[str, torch.Tensor]
    members: list[Mapping[str, Source]]
    coef: dict[str, np.ndarray]
    then: list[Callable[[], None]] = field(default_factory=list)
    prep_flops: float = 0.0
    _nonzero: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _split: dict[int, tuple[float, list[tuple[int, float]]]] = field(default_factory=dict, repr=False)

    def nonzero_members(self, name: str) -> np.ndarray:
        """The members with a weight for ``name`` (computed once per weight array)."""
        c = self.coef[name]
        found = self._nonzero.get(id(c))
        if found is None:
            found = self._nonzero[id(c)] = np.flatnonzero(c.any(axis=1) if c.ndim == 2 else c)
        return found

    def flops(self) -> float:
        """This fusion's arithmetic on a device of its own: a multiply-add (2 FLOPs) per value it
        reads with a weight (a member's whole parameter, or its weighted rows), plus
        ``prep_flops`` (however the runtime batches the sums)."""
        sums = 0.0
        for name, c in self.coef.items():
            size = self.targets[name].numel()
            weighted = np.count_nonzero(c) / (c.shape[1] if c.ndim == 2 else 1)   # whole members' worth
            sums += 2.0 * size * float(weighted)
        return sums + self.prep_flops

    def run(self) -> None:
        """This job alone, in float64. A parameter smaller than ``STACK_BELOW`` values is one
        weighted reduction over its members stacked; a larger one is summed member by member
        (stacking would copy every member in float64, per-member calls cost ~10 µs each: at
        hundreds of members per fusion on a small model, those calls were most of the time)."""
        scratch: dict[str, torch.Tensor] = {}   # a received subnetwork's dense form, rebuilt per member
        with _reading_arrays(), torch.no_grad():
            for name, c in self.coef.items():
                target = self.targets[name]
                used = self.nonzero_members(name).tolist()
                weights = torch.from_numpy(np.ascontiguousarray(c, dtype=np.float64))
                weights = weights.view(*weights.shape, *([1] * (target.dim() + 1 - weights.dim())))
                if target.numel() < STACK_BELOW:
                    values = torch.stack([_as_tensor(self.members[m][name]) for m in used]) if used else None
                    target.copy_((cast(torch.Tensor, values).double() * weights[used]).sum(dim=0) if used
                                 else torch.zeros_like(target))
                    continue
                acc = torch.zeros(target.shape, dtype=torch.float64)
                for m in used:
                    _add_member(acc, weights[m], self.members[m], name, scratch)
                target.copy_(acc)
        self.finish()

    def finish(self) -> None:
        for step in self.then:
            step()


def weighted_mean_job(targets: dict[str, torch.Tensor], own_weight: float,
                      peers: Sequence[tuple[Mapping[str, Source], float]]) -> FusionJob | None:
    """The weighted mean of the targets' own values and the peers' (one weight each), or None
    when there is nothing to average (no peers, or a zero total weight)."""
    total = own_weight + sum(w for _, w in peers)
    if not peers or total <= 0:
        return None
    weights = np.array([own_weight, *(w for _, w in peers)], dtype=np.float64) / total
    members: list[Mapping[str, Source]] = [targets, *(tensors for tensors, _ in peers)]
    return FusionJob(targets, members, {name: weights for name in targets})


def run_fusion_jobs(jobs: Sequence[FusionJob]) -> None:
    """Every job's fusion: those that weigh each member once, together when the product pays
    (see the module doc), the rest one job at a time."""
    together = [job for job in jobs if all(c.ndim == 1 for c in job.coef.values())]
    names = sorted({n for job in together for n in job.coef})
    if len(together) < 2 or not _dense_pays(together, names):
        together = []
    with _reading_arrays():
        for name in names if together else []:
            _dense(name, [job for job in together if name in job.coef])
    done = {id(job) for job in together}
    for job in jobs:
        if id(job) in done:
            job.finish()
        else:
            job.run()


def _split(job: FusionJob, name: str) -> tuple[float, list[tuple[Source, float]]]:
    """The target's own weight for ``name``, and (value, weight) of every other member with one.
    The weights are worked out once per weight array (averaging shares one across parameters);
    which member is the target itself is the same for every parameter."""
    c, target = job.coef[name], job.targets[name]
    plan = job._split.get(id(c))
    if plan is None:
        own, others = 0.0, []
        for m in job.nonzero_members(name).tolist():
            if job.members[m][name] is target:
                own += float(c[m])
            else:
                others.append((m, float(c[m])))
        plan = job._split[id(c)] = (own, others)
    return plan[0], [(job.members[m][name], w) for m, w in plan[1]]


def _dense_pays(jobs: Sequence[FusionJob], names: list[str]) -> bool:
    needed = sum(job.nonzero_members(n).size for job in jobs for n in job.coef)
    dense = 0
    for name in names:
        users = [job for job in jobs if name in job.coef]
        shared = {id(value) for job in users for value, _ in _split(job, name)[1]}
        dense += len(users) * (len(shared) + 1)   # the product, and each target's own term
    return dense <= DENSE_WORK_FACTOR * needed


def _dense(name: str, jobs: Sequence[FusionJob]) -> None:
    """One parameter of every job: (jobs × shared members) @ (shared members × values), plus each
    target's own weight times its own value, in place (a target is never a shared member)."""
    index: dict[int, int] = {}
    sources: list[torch.Tensor] = []
    at_job, at_source, weight = [], [], []
    own = np.zeros(len(jobs), dtype=np.float64)
    dtype = jobs[0].targets[name].dtype
    for j, job in enumerate(jobs):
        own[j], shared = _split(job, name)
        for value, w in shared:
            k = index.get(id(value))
            if k is None:
                k = index[id(value)] = len(sources)
                sources.append(_as_tensor(value).reshape(-1).to(dtype))
            at_job.append(j)
            at_source.append(k)
            weight.append(w)
    fused = None
    if sources:
        weights = np.zeros((len(jobs), len(sources)), dtype=np.float64)
        np.add.at(weights, (np.asarray(at_job), np.asarray(at_source)), np.asarray(weight))
        stacked = torch.stack(sources)
        fused = torch.from_numpy(weights).to(dtype) @ stacked
    with torch.no_grad():
        for j, job in enumerate(jobs):
            target = job.targets[name]
            target.mul_(float(own[j]))
            if fused is not None:
                target.add_(fused[j].view(target.shape))
