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
plus each device's own terms (its own weight times its own value, and the members no other
device holds). Where the weights differ row by row (FedSub), it is one such product per row, run
as one batched product over the rows. The product is chosen only where it does at most
``DENSE_WORK_FACTOR`` times the multiply-adds the jobs need (a dense product runs about that much
faster per multiply-add than one pass per member), so a sparse graph of thousands of devices
(each with a handful of members out of thousands) keeps one job at a time. A product per row
runs at a fraction of that rate (many small products, and weights to build for every row), so
it is chosen only up to ``ROW_DENSE_WORK_FACTOR`` times the work: devices that share a few of
many peers (a contact run's batch of walkers) fuse one at a time. The product runs in
the parameters' dtype (float32): converting every member to float64 first cost more than the
product itself on a memory-bound machine; it differs from the float64 path by a few units in the
last place, which a test bounds.

A member may hold only some rows of a parameter (``SomeRows``: a peer's subnetwork, as it
arrived): a job rebuilds its dense form in one reused buffer as it sums, so no zero-filled copy
of a received message is kept.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch

Source = torch.Tensor | np.ndarray
DENSE_WORK_FACTOR = 16
ROW_DENSE_WORK_FACTOR = 4
STACK_BELOW = 4096   # parameters smaller than this are fused as one stacked reduction (``FusionJob.run``)
WEIGHTS_AT_ONCE = 1 << 22   # (rows × jobs × sources) weights held at once by ``_dense``; more: jobs in chunks


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
    _split: dict[str, tuple[np.ndarray, list[Mapping[str, Source]], np.ndarray, list[int]]] = field(
        default_factory=dict, repr=False)

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
    """Every job's fusion: those of one kind (a weight per member, or per member and row) together
    where the product pays (see the module doc), the rest one job at a time."""
    done: set[int] = set()
    for per_row in (False, True):
        together = [job for job in jobs if all((c.ndim == 2) == per_row for c in job.coef.values())]
        names = sorted({n for job in together for n in job.coef})
        factor = ROW_DENSE_WORK_FACTOR if per_row else DENSE_WORK_FACTOR
        if len(together) < 2 or not _dense_pays(together, names, factor):
            continue
        with _reading_arrays():
            for name in names:
                _dense(name, [job for job in together if name in job.coef])
        done.update(id(job) for job in together)
    for job in jobs:
        if id(job) in done:
            job.finish()
        else:
            job.run()


def _stored(member: Mapping[str, Source], name: str) -> object:
    """What holds ``member[name]``'s values, found without building a dense copy: every receiver
    of one decoded message holds the same one, and a target is its own."""
    return member.compact[name] if isinstance(member, SomeRows) else member[name]


def _split(job: FusionJob, name: str) -> tuple[np.ndarray, list[Mapping[str, Source]], np.ndarray, list[int]]:
    """For ``name``: the target's own weights (one per row, or one), every other member with a
    weight, their weights (members × rows, or × 1) and the identity of what holds each one's
    values (``_stored``). Worked out once per job and parameter."""
    plan = job._split.get(name)
    if plan is None:
        c, target = job.coef[name], job.targets[name]
        rows = c.reshape(c.shape[0], -1)   # members × rows (one row: a weight per member)
        own, others = np.zeros(rows.shape[1], dtype=np.float64), []
        for m in job.nonzero_members(name).tolist():
            if _stored(job.members[m], name) is target:
                own = own + rows[m]
            else:
                others.append(m)
        members = [job.members[m] for m in others]
        plan = job._split[name] = (own, members, rows[others], [id(_stored(member, name)) for member in members])
    return plan


def _dense_pays(jobs: Sequence[FusionJob], names: list[str], factor: float) -> bool:
    """Whether the products do at most ``factor`` times the multiply-adds the jobs need (known
    to be no as soon as the parameters counted so far exceed it)."""
    allowed = factor * sum(job.nonzero_members(n).size for job in jobs for n in job.coef)
    dense = 0
    for name in names:
        users = [job for job in jobs if name in job.coef]
        held = Counter(key for job in users for key in _split(job, name)[3])
        shared = sum(1 for count in held.values() if count > 1)
        dense += len(users) * (shared + 1) + (len(held) - shared)   # the product, and each job's own terms
        if dense > allowed:
            return False
    return True


def _dense(name: str, jobs: Sequence[FusionJob]) -> None:
    """One parameter of every job: (jobs × shared members) @ (shared members × values), plus each
    job's own terms (its target's own weight times its own value, and the members no other job
    holds), in place (a target is never a shared member). With a weight per member and row, one
    such product per row (``torch.bmm`` over the rows); a weight per member is a single row
    spanning the whole parameter."""
    splits = [_split(job, name) for job in jobs]
    keys = [job_keys for _, _, _, job_keys in splits]
    held = Counter(key for job_keys in keys for key in job_keys)
    index: dict[int, int] = {}
    sources: list[Mapping[str, Source]] = []
    for (_, members, _, _), job_keys in zip(splits, keys, strict=True):
        for member, key in zip(members, job_keys, strict=True):
            if held[key] > 1 and key not in index:
                index[key] = len(sources)
                sources.append(member)
    target0 = jobs[0].targets[name]
    per_row = jobs[0].coef[name].ndim == 2
    rows = target0.shape[0] if per_row else 1

    def scale(weights: np.ndarray, target: torch.Tensor) -> torch.Tensor | float:
        """Weights that multiply ``target`` row by row, or its one weight."""
        if per_row:
            return torch.from_numpy(weights).to(target.dtype).view(rows, *[1] * (target.dim() - 1))
        return float(weights[0])

    stacked = torch.stack([_as_tensor(member[name]).reshape(rows, -1).to(target0.dtype) for member in sources],
                          dim=1) if sources else None   # rows × sources × values per row
    step = max(1, WEIGHTS_AT_ONCE // max(1, rows * len(sources)))
    for first in range(0, len(jobs), step):
        chunk = range(first, min(first + step, len(jobs)))
        fused = None
        if stacked is not None:
            weights = torch.zeros((rows, len(chunk), len(sources)), dtype=target0.dtype)
            for j in chunk:
                at = [(i, index[key]) for i, key in enumerate(keys[j]) if key in index]
                if at:
                    mine, theirs = zip(*at)
                    values = torch.from_numpy(splits[j][2][list(mine)]).to(weights.dtype)
                    weights[:, j - first].index_add_(1, torch.tensor(theirs), values.T)
            product = weights[0] @ stacked[0] if rows == 1 else torch.bmm(weights, stacked)
            fused = product.reshape(rows, len(chunk), -1)
        with torch.no_grad():
            for j in chunk:
                target = jobs[j].targets[name]
                own, members, w, _ = splits[j]
                target.mul_(scale(own, target))
                for member, key, w_m in zip(members, keys[j], w, strict=True):
                    if key not in index:   # held by this job alone
                        target.add_(_as_tensor(member[name]).to(target.dtype) * scale(w_m, target))
                if fused is not None:
                    target.add_(fused[:, j - first].reshape(target.shape))
