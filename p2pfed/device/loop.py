"""What one device does each time it acts — the same in every runtime.

FedSub Alg. 1, client side, with the server's part on the device: integrate what arrived, train
on the result, share; the model is evaluated right after the fusion (``after-fusion``, the
protocol of the framework the FedSub papers ran in: ProtoHAR's evaluates as soon as the fused
model arrives) or after local training (``after-training``). The runtime decides *when* a
device acts (a synchronous round, a tick of the device's own clock, a wall-clock round) and
carries the encoded messages that ``act`` returns over its links; this class decides *what*
happens, in which order, and what the Recorder hears of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from p2pfed.algorithms import NOT_READY, Algorithm, Deferred, Payload, Received
from p2pfed.device.exchange import Frame
from p2pfed.device.wire import RELAY_KEY, Signature, encode_share_signed
from p2pfed.energy.work import training_flops
from p2pfed.transport import CodecError
from p2pfed.transport.signing import Signer
from p2pfed.learning.batched_evaluation import evaluate_many
from p2pfed.learning.batched_fusion import FusionJob, run_fusion_jobs
from p2pfed.learning.batched_training import TrainingJob, train_jobs
from p2pfed.learning.training import Evaluation, counting_work, evaluate
from p2pfed.results.recorder import Recorder

EVALUATE_WHEN = ("after-fusion", "after-training")


@dataclass(frozen=True)
class Outgoing:
    """One encoded share, ready for the runtime's links."""

    part: str           # "whole", or the part's name when the share is split
    round: int
    sent_at: float
    data: bytes
    to: int | None = None   # the one peer this part is addressed to (None: every neighbour)
    origin: int | None = None   # a part the method marked as carried for another device (RELAY_KEY)
    signature: Signature | None = None   # what its signature covers (None: unsigned)

    def frame(self) -> Frame:
        """The share as one frame for every link it takes, its signature's digest known."""
        return Frame(self.data, memo={} if self.signature is None else self.signature.memo())


@dataclass(frozen=True)
class PendingFusion:
    """A fusion whose inputs are taken (the artifacts it was given, marked used) and whose
    arithmetic is not done yet: the runtime runs the jobs of devices acting together in one go.
    ``work`` is the job, a ``Deferred`` one (waiting for offloaded work), or None (none left)."""

    work: FusionJob | Deferred | None
    used: list[Received]   # the artifacts this fusion was given for the first time

    def job(self) -> FusionJob | None:
        return self.work.job() if isinstance(self.work, Deferred) else self.work


class DeviceLoop:
    """Drives one device's algorithm and reports its evaluations and fusions to the Recorder."""

    def __init__(self, device: int, algorithm: Algorithm, recorder: Recorder, *,
                 clock: Callable[[], float], max_message_bytes: int,
                 neighbours: Callable[[], list[int]] | None = None,
                 visible_classes: Callable[[int], frozenset[int] | None] | None = None,
                 max_age_s: float | None = None, split_parts: bool = False,
                 evaluate_when: str = "after-fusion", evaluate_both: bool = False,
                 precision: str = "float32", signer: Signer | None = None) -> None:
        """``clock``: the runtime's time (simulated seconds, or wall-clock seconds);
        ``neighbours``: the devices this one can reach now, as the runtime sees them (offered to
        the method as ``ctx.neighbours()``);
        ``visible_classes``: the training classes a device has in a round (dynamic data);
        ``max_age_s``: the TTL of cached artifacts; ``split_parts``: share in separately useful
        parts (prototypes before subnetworks) for links that may end mid-transfer;
        ``evaluate_when``: where in ``act`` a due evaluation happens (``EVALUATE_WHEN``), the one
        the headline metrics report; ``evaluate_both``: score the other point of ``act`` too;
        ``precision``: the wire precision of shared float tensors (``engine.precision``);
        ``signer``: the device's key, which signs every share (``security.sign_artifacts``)."""
        if evaluate_when not in EVALUATE_WHEN:
            raise ValueError(f"evaluation.when: {evaluate_when!r}; choose one of {', '.join(EVALUATE_WHEN)}")
        self.device = device
        self.clock = clock
        self.algorithm = algorithm
        self.recorder = recorder
        self.max_message_bytes = max_message_bytes
        self.precision = precision
        self.signer = signer
        self.visible_classes = visible_classes
        self.max_age_s = max_age_s
        self.split_parts = split_parts
        self.evaluate_when = evaluate_when
        self.evaluate_both = evaluate_both
        if neighbours is not None:
            algorithm.ctx.neighbours = neighbours
        self.actions = 0    # times the device acted (trained and shared)
        self.fusions = 0    # fusions that used at least one new artifact
        # Set by a runtime that models devices (``devices`` in the scenario): each step then
        # counts its work in ``work_flops`` (p2pfed/energy/work.py), ``fusion_flops`` of it fusing.
        self.count_work = False
        self.work_flops = 0.0
        self.fusion_flops = 0.0

    def act(self, round: int, *, train: bool = True, evaluate: bool = False) -> list[Outgoing]:
        """One step of the device: fuse → train → share, with the evaluation (if due) after the
        fusion or after the training — ``act_together`` of this device alone, its work run here,
        unbatched. A device that does not take part this round (``train`` False) still fuses and
        evaluates, but neither trains nor shares."""
        return act_together([self], round, train=[train], evaluate=evaluate, batched=False)[0]

    def start_fusion(self, round: int) -> PendingFusion | None:
        """Set this round's visible data, drop stale artifacts, and hand the fresh ones to the
        method's ``fuse`` (None: nothing new, or the method was not ready for it)."""
        algo = self.algorithm
        if self.visible_classes is not None:
            algo.ctx.set_visible_classes(self.visible_classes(round))
        algo.drop_stale(self.clock(), self.max_age_s)
        return begin_fusion(algo, round, self.clock())

    def finish_fusion(self, pending: PendingFusion | None) -> None:
        """Once the fusion's arithmetic is done: count the fusion and the age of what it used."""
        if pending is not None and pending.used:
            self.fusions += 1
            now = self.clock()
            self.recorder.fused(r.age(now) for r in pending.used)

    def share(self, round: int, *, train: bool) -> list[Outgoing]:
        """The encoded shares of a device that took part in the round (none otherwise). Where
        links may cut a transfer (``split_parts``) every part is its own message; elsewhere the
        unaddressed parts travel as one (``merge_parts``) and addressed ones alone."""
        if not train:
            return []
        algo = self.algorithm
        self.actions += 1
        now = self.clock()
        shared = algo.share(round)
        parts = [] if shared is None else [shared] if isinstance(shared, Payload) else list(shared)
        if not self.split_parts:
            parts = merge_parts(parts)
        out = []
        for p in parts:
            try:
                data, signature = encode_share_signed(algo.kind(), self.device, round, now, p,
                                                      self.max_message_bytes, precision=self.precision,
                                                      signer=self.signer)
            except CodecError as exc:
                if exc.reason != "not-finite":
                    raise
                # A model driven to NaN or inf (e.g. by a neighbour's poison) has nothing to send;
                # the run goes on, and the drop is counted as this device's own, by reason.
                self.recorder.dropped(self.device, self.device, round, "share:not-finite", str(exc))
                continue
            relay = p.meta.get(RELAY_KEY)
            out.append(Outgoing(p.meta.get("part", "whole"), round, now, data, to=p.meta.get("to"),
                                origin=relay.get("origin") if isinstance(relay, dict) else None,
                                signature=signature))
        return out

    def evaluate(self, round: int, evaluation: Evaluation | None = None, when: str | None = None) -> Evaluation:
        """Record the evaluation of the model the device holds now under ``round`` (or
        interval): ``evaluation`` when the runtime computed it with other devices', else here.
        ``when``: the point of ``act`` it was scored at (None: an instant outside ``act``, the
        contact runtime's); the headline metrics take the device's own ``evaluate_when``."""
        algo = self.algorithm
        ctx = algo.ctx
        if evaluation is None:
            evaluation = evaluate(algo.evaluated_model(), ctx.x_test, ctx.y_test)
        primary = when is None or when == self.evaluate_when
        self.recorder.evaluated(self.device, round, self.clock(), evaluation, protocol=when, primary=primary)
        if primary and ctx.generalization_data is not None:   # evaluation.generalization: the others' test data
            x, y = ctx.generalization_data()
            self.recorder.generalized(self.device, round, evaluate(algo.evaluated_model(), x, y).f1_macro)
        return evaluation

    # -- state (checkpoints) --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm.state_dict(), "actions": self.actions, "fusions": self.fusions}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.algorithm.load_state_dict(state["algorithm"])
        self.actions, self.fusions = int(state["actions"]), int(state["fusions"])


def begin_fusion(algo: Algorithm, round: int, now: float) -> PendingFusion | None:
    """Hand the fresh payloads to the method's ``fuse`` (None: nothing new, or the method was not
    ready for it and they stay fresh)."""
    if not algo.has_new():
        return None
    fresh = algo.take_fresh()
    work = algo.fuse(fresh, round, now)
    if work is NOT_READY:
        for item in fresh:   # offered again next time
            item.fresh = True
        return None
    if not (work is None or isinstance(work, (FusionJob, Deferred))):
        raise TypeError(f"{type(algo).__name__}.fuse returned {type(work).__name__}; expected a "
                        "FusionJob, a Deferred, NOT_READY or None")
    kept = {id(r) for r in algo.cache.values()}   # the method may have dropped some (its own TTL)
    used = [r for r in fresh if id(r) in kept]
    if algo.reads_fresh_only:   # it never reads them again: their arrays need not stay
        algo.forget_fused(used)
    return PendingFusion(work, used)


def merge_parts(parts: Sequence[Payload]) -> list[Payload]:
    """A share's unaddressed parts as one payload (their meta and tensors together, without the
    part names), each addressed part (``meta['to']``) as it is; a lone part stays as it is."""
    open_parts = [p for p in parts if p.meta.get("to") is None]
    if len(open_parts) < 2:
        return list(parts)
    meta: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    for p in open_parts:
        for key, value in p.meta.items():
            if key == "part":
                continue
            if key in meta and meta[key] != value:
                raise ValueError(f"the parts of one share disagree on meta {key!r}")
            meta[key] = value
        for name, array in p.tensors.items():
            if name in tensors:
                raise ValueError(f"two parts of one share both hold tensor {name!r}")
            tensors[name] = array
    return [Payload(meta, tensors), *(p for p in parts if p.meta.get("to") is not None)]


def act_together(loops: Sequence[DeviceLoop], rounds: int | Sequence[int], *, train: Sequence[bool],
                 evaluate: bool, batched: bool = True) -> list[list[Outgoing]]:
    """``act`` for devices that act at the same instant, returning each one's shares; ``rounds``
    is the round (or interval) of all of them, or each one's own (devices on their own clocks):
    ``start_together`` then ``finish_together``.

    A device's round touches only its own state, so this equals acting one device after the
    other (exactly with ``batched`` False; to float rounding otherwise)."""
    rounds = _per_device(rounds, len(loops))
    # the fusions' inputs (and their jobs) are freed before the devices evaluate and train
    fuse_together(loops, start_together(loops, rounds), batched=batched)
    return after_fusion(loops, rounds, train=train, evaluate=evaluate, batched=batched)


def start_together(loops: Sequence[DeviceLoop], rounds: int | Sequence[int]) -> list[PendingFusion | None]:
    """The first half of ``act_together``: each device's fusion up to its arithmetic (work a
    method sent to ``ctx.offload`` runs meanwhile, or together when first needed)."""
    return [loop.start_fusion(r) for loop, r in zip(loops, _per_device(rounds, len(loops)), strict=True)]


def finish_together(loops: Sequence[DeviceLoop], rounds: int | Sequence[int],
                    pending: Sequence[PendingFusion | None], *, train: Sequence[bool], evaluate: bool,
                    batched: bool = True) -> list[list[Outgoing]]:
    """The second half of ``act_together``, from the started fusions (``start_together``). When
    ``batched``, the arithmetic of every device's fusion runs in one go (``run_fusion_jobs``),
    the plain training jobs as one batched computation per architecture (``train_jobs``) and the
    evaluations together (``evaluate_together``); otherwise each one alone, in device order."""
    fuse_together(loops, pending, batched=batched)
    return after_fusion(loops, rounds, train=train, evaluate=evaluate, batched=batched)


def fuse_together(loops: Sequence[DeviceLoop], pending: Sequence[PendingFusion | None], *,
                  batched: bool = True) -> None:
    """The started fusions' arithmetic (``run_fusion_jobs`` when ``batched``, else each job
    alone, in device order), then each device's fusion counted."""
    each: list[FusionJob | None] = [None if p is None else p.job() for p in pending]
    jobs = [job for job in each if job is not None]
    if batched:
        run_fusion_jobs(jobs)
    else:
        for job in jobs:
            job.run()
    for loop, fusion, done in zip(loops, pending, each, strict=True):
        loop.finish_fusion(fusion)
        if loop.count_work:
            loop.fusion_flops = loop.work_flops = 0.0 if done is None else done.flops()


def after_fusion(loops: Sequence[DeviceLoop], rounds: int | Sequence[int], *, train: Sequence[bool],
                 evaluate: bool, batched: bool = True) -> list[list[Outgoing]]:
    """What follows the fusions in ``act_together``: the evaluations due, the training, the shares."""
    rounds = _per_device(rounds, len(loops))
    if evaluate:
        _evaluate_where(loops, rounds, "after-fusion", batched)
    training: list[TrainingJob] = []
    for loop, r, takes_part in zip(loops, rounds, train, strict=True):
        if takes_part:
            if loop.count_work:   # training the method does inside train itself counts too
                with counting_work() as inline:
                    work = loop.algorithm.train(r)
            else:
                work = loop.algorithm.train(r)
            if work is not None and not isinstance(work, TrainingJob):
                raise TypeError(f"{type(loop.algorithm).__name__}.train returned {type(work).__name__}; "
                                "expected a TrainingJob or None")
            if work is not None:
                training.append(work)
            if loop.count_work:
                trained = list(inline)
                if work is not None:
                    trained += [(job.model, int(job.x.shape[0]), job.num_epochs, int(job.x.shape[1]))
                                for job in work.phases()]
                loop.work_flops += sum(training_flops(m, n, e, width) for m, n, e, width in trained)
    for loop in loops:   # the work the methods counted themselves (``ctx.count_work``) in fuse or train
        ctx = loop.algorithm.ctx
        if loop.count_work:
            loop.work_flops += ctx.noted_flops
            loop.fusion_flops += ctx.noted_flops
        ctx.noted_flops = 0.0
    if batched:
        train_jobs(training)
    else:
        for training_job in training:
            training_job.run()
    if evaluate:
        _evaluate_where(loops, rounds, "after-training", batched)
    return [loop.share(r, train=takes_part) for loop, r, takes_part in zip(loops, rounds, train, strict=True)]


def _per_device(rounds: int | Sequence[int], count: int) -> list[int]:
    return [rounds] * count if isinstance(rounds, int) else list(rounds)


def _evaluate_where(loops: Sequence[DeviceLoop], rounds: list[int], when: str, batched: bool) -> None:
    """The due evaluations at this point of ``act`` (``when``): of the devices whose headline it
    is, and of those that score both points."""
    chosen = [i for i, loop in enumerate(loops) if loop.evaluate_when == when or loop.evaluate_both]
    if chosen:
        evaluate_together([loops[i] for i in chosen], [rounds[i] for i in chosen], batched=batched, when=when)


def evaluate_together(loops: Sequence[DeviceLoop], rounds: int | Sequence[int], *,
                      batched: bool = True, when: str | None = None) -> None:
    """Every device's evaluation at one instant, under ``rounds`` (one for all, or each one's):
    the models they would use, scored together (``evaluate_many``) when ``batched``, else one at
    a time. ``when``: the point of ``act`` (None: an instant outside it)."""
    rounds = _per_device(rounds, len(loops))
    if not batched:
        for loop, r in zip(loops, rounds, strict=True):
            loop.evaluate(r, when=when)
        return
    ctxs = [loop.algorithm.ctx for loop in loops]
    evaluations = evaluate_many([loop.algorithm.evaluated_model() for loop in loops],
                                [c.x_test for c in ctxs], [c.y_test for c in ctxs])
    for loop, r, evaluation in zip(loops, rounds, evaluations, strict=True):
        loop.evaluate(r, evaluation, when=when)
