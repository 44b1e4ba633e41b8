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

from p2pfed.algorithms import Algorithm, LaterFusion, Received, prepare_fusions
from p2pfed.device.wire import encode_share
from p2pfed.learning.batched_evaluation import evaluate_many
from p2pfed.learning.batched_fusion import FusionJob, run_fusion_jobs
from p2pfed.learning.batched_training import TrainingJob, train_jobs
from p2pfed.learning.training import Evaluation
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


@dataclass(frozen=True)
class PendingFusion:
    """A fusion whose inputs are taken (the artifacts it uses, marked used) and whose arithmetic
    is not done yet: the runtime runs the jobs of devices acting together in one go. ``job`` is
    the arithmetic, or what yields it once work sent elsewhere is back (``LaterFusion``: FedSub's
    K sweeps in a helper process); None: none left."""

    job: FusionJob | LaterFusion | None
    used: list[Received]   # the artifacts this fusion used for the first time

    def resolved_job(self) -> FusionJob | None:
        return self.job() if callable(self.job) else self.job


class DeviceLoop:
    """Drives one device's algorithm and reports its evaluations and fusions to the Recorder."""

    def __init__(self, device: int, algorithm: Algorithm, recorder: Recorder, *,
                 clock: Callable[[], float], max_message_bytes: int,
                 neighbours: Callable[[], list[int]] | None = None,
                 visible_classes: Callable[[int], frozenset[int] | None] | None = None,
                 max_age_s: float | None = None, split_parts: bool = False,
                 evaluate_when: str = "after-fusion") -> None:
        """``clock``: the runtime's time (simulated seconds, or wall-clock seconds);
        ``neighbours``: the devices this one can reach now, as the runtime sees them (offered to
        the method as ``ctx.neighbours()``);
        ``visible_classes``: the training classes a device has in a round (dynamic data);
        ``max_age_s``: the TTL of cached artifacts; ``split_parts``: share in separately useful
        parts (prototypes before subnetworks) for links that may end mid-transfer;
        ``evaluate_when``: where in ``act`` a due evaluation happens (``EVALUATE_WHEN``)."""
        if evaluate_when not in EVALUATE_WHEN:
            raise ValueError(f"evaluation.when: {evaluate_when!r}; choose one of {', '.join(EVALUATE_WHEN)}")
        self.device = device
        self.clock = clock
        self.algorithm = algorithm
        self.recorder = recorder
        self.max_message_bytes = max_message_bytes
        self.visible_classes = visible_classes
        self.max_age_s = max_age_s
        self.split_parts = split_parts
        self.evaluate_when = evaluate_when
        if neighbours is not None:
            algorithm.ctx.neighbours = neighbours
        self.actions = 0    # times the device acted (trained and shared)
        self.fusions = 0    # fusions that used at least one new artifact

    def act(self, round: int, *, train: bool = True, evaluate: bool = False) -> list[Outgoing]:
        """One step of the device: fuse → train → share, with the evaluation (if due) after the
        fusion or after the training. A device that does not take part this round (``train``
        False) still fuses and evaluates, but neither trains nor shares."""
        pending = self.start_fusion(round)
        job = pending.resolved_job() if pending is not None else None
        if job is not None:
            job.run()
        self.finish_fusion(pending)
        if evaluate and self.evaluate_when == "after-fusion":
            self.evaluate(round)
        if train:
            self.algorithm.train(round)
        if evaluate and self.evaluate_when == "after-training":
            self.evaluate(round)
        return self.share(round, train=train)

    def start_fusion(self, round: int) -> PendingFusion | None:
        """Visible data, stale artifacts, and the fusion up to its arithmetic (None: nothing new
        to fuse)."""
        if not self.wants_fusion(round):
            return None
        return self.fusion_pending(round)

    def wants_fusion(self, round: int) -> bool:
        """Set this round's visible data and drop stale artifacts; whether anything new is left
        to fuse (the first half of ``start_fusion``)."""
        algo = self.algorithm
        if self.visible_classes is not None:
            algo.ctx.set_visible_classes(self.visible_classes(round))
        algo.drop_stale(self.clock(), self.max_age_s)
        return algo.has_new()

    def fusion_pending(self, round: int) -> PendingFusion:
        """The fusion of a device that ``wants_fusion``, up to its arithmetic."""
        algo = self.algorithm
        before = [r for r in algo.cache.values() if r.fresh]
        job = algo.start_fusion(round, self.clock())
        return PendingFusion(job, [r for r in before if not r.fresh])

    def finish_fusion(self, pending: PendingFusion | None) -> None:
        """Once the fusion's arithmetic is done: count the fusion and the age of what it used."""
        if pending is not None and pending.used:
            self.fusions += 1
            now = self.clock()
            self.recorder.fused(r.age(now) for r in pending.used)

    def share(self, round: int, *, train: bool) -> list[Outgoing]:
        """The encoded shares of a device that took part in the round (none otherwise)."""
        if not train:
            return []
        algo = self.algorithm
        self.actions += 1
        now = self.clock()
        split = self.split_parts or algo.parts_always
        payloads = algo.share_parts(round) if split else [algo.share(round)]
        return [Outgoing(p.meta.get("part", "whole"), round, now,
                         encode_share(algo.message_kind, self.device, round, now, p, self.max_message_bytes),
                         to=p.meta.get("to"))
                for p in payloads if p is not None]

    def evaluate(self, round: int, evaluation: Evaluation | None = None) -> Evaluation:
        """Record the evaluation of the model the device holds now under ``round`` (or
        interval): ``evaluation`` when the runtime computed it with other devices', else here."""
        if evaluation is None:
            evaluation = self.algorithm.evaluate()
        self.recorder.evaluated(self.device, round, self.clock(), evaluation)
        ctx = self.algorithm.ctx
        if ctx.generalization_data is not None:   # evaluation.generalization: the others' test data
            with ctx.evaluating_on(*ctx.generalization_data()):
                self.recorder.generalized(self.device, round, self.algorithm.evaluate().f1_macro)
        return evaluation

    # -- state (checkpoints) --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm.state_dict(), "actions": self.actions, "fusions": self.fusions}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.algorithm.load_state_dict(state["algorithm"])
        self.actions, self.fusions = int(state["actions"]), int(state["fusions"])


def act_together(loops: Sequence[DeviceLoop], rounds: int | Sequence[int], *, train: Sequence[bool],
                 evaluate: bool, batched: bool = True) -> list[list[Outgoing]]:
    """``act`` for devices that act at the same instant, returning each one's shares; ``rounds``
    is the round (or interval) of all of them, or each one's own (devices on their own clocks):
    ``start_together`` then ``finish_together``.

    A device's round touches only its own state, so this equals acting one device after the
    other (exactly with ``batched`` False; to float rounding otherwise)."""
    rounds = _per_device(rounds, len(loops))
    pending = start_together(loops, rounds, batched=batched)
    return finish_together(loops, rounds, pending, train=train, evaluate=evaluate, batched=batched)


def start_together(loops: Sequence[DeviceLoop], rounds: int | Sequence[int], *, batched: bool = True,
                   ahead: bool = False) -> list[PendingFusion | None]:
    """The first half of ``act_together``: each device's fusion up to its arithmetic. When
    ``batched``, the methods first prepare their fusions together (``prepare_fusions``: FedSub's
    K sweeps in one call, over both cores); ``ahead``: the caller finishes them later, having
    done other work meanwhile, so that work may run elsewhere in the meantime (FedSub's sweeps
    go to a helper process)."""
    rounds = _per_device(rounds, len(loops))
    fusing = [loop.wants_fusion(r) for loop, r in zip(loops, rounds, strict=True)]
    if batched:
        prepare_fusions([loop.algorithm for loop, wants in zip(loops, fusing) if wants],
                        [loop.clock() for loop, wants in zip(loops, fusing) if wants], ahead=ahead)
    return [loop.fusion_pending(r) if wants else None for loop, r, wants in zip(loops, rounds, fusing)]


def finish_together(loops: Sequence[DeviceLoop], rounds: int | Sequence[int],
                    pending: Sequence[PendingFusion | None], *, train: Sequence[bool], evaluate: bool,
                    batched: bool = True) -> list[list[Outgoing]]:
    """The second half of ``act_together``, from the started fusions (``start_together``). When
    ``batched``, the arithmetic of every device's fusion runs in one go (``run_fusion_jobs``),
    the devices whose method offers a plain ``training_job`` train as one batched computation
    per architecture (``train_jobs``), the others through their own ``train``, and the
    evaluations run together (``evaluate_together``)."""
    rounds = _per_device(rounds, len(loops))
    jobs = [job for job in (p.resolved_job() for p in pending if p is not None) if job is not None]
    if batched:
        run_fusion_jobs(jobs)
    else:
        for job in jobs:
            job.run()
    for loop, fusion in zip(loops, pending, strict=True):
        loop.finish_fusion(fusion)
    if evaluate:
        _evaluate_where(loops, rounds, "after-fusion", batched)
    training: list[TrainingJob] = []
    for loop, r, takes_part in zip(loops, rounds, train, strict=True):
        if not takes_part:
            continue
        job = loop.algorithm.training_job(r) if batched else None
        if job is None:
            loop.algorithm.train(r)
        else:
            training.append(job)
    train_jobs(training)
    if evaluate:
        _evaluate_where(loops, rounds, "after-training", batched)
    return [loop.share(r, train=takes_part) for loop, r, takes_part in zip(loops, rounds, train, strict=True)]


def _per_device(rounds: int | Sequence[int], count: int) -> list[int]:
    return [rounds] * count if isinstance(rounds, int) else list(rounds)


def _evaluate_where(loops: Sequence[DeviceLoop], rounds: list[int], when: str, batched: bool) -> None:
    """The due evaluations of the devices that evaluate at this point of ``act`` (``when``)."""
    chosen = [i for i, loop in enumerate(loops) if loop.evaluate_when == when]
    if chosen:
        evaluate_together([loops[i] for i in chosen], [rounds[i] for i in chosen], batched=batched)


def evaluate_together(loops: Sequence[DeviceLoop], rounds: int | Sequence[int], *,
                      batched: bool = True) -> None:
    """Every device's evaluation at one instant, under ``rounds`` (one for all, or each one's):
    the models they would use, scored together (``evaluate_many``) when ``batched``."""
    rounds = _per_device(rounds, len(loops))
    scored = [(loop, loop.algorithm.scored_model() if batched else None) for loop in loops]
    together = [(loop, model) for loop, model in scored if model is not None]
    ctxs = [loop.algorithm.ctx for loop, _ in together]
    evaluations = evaluate_many([model for _, model in together], [c.x_test for c in ctxs],
                                [c.y_test for c in ctxs])
    done = {id(loop): evaluation for (loop, _), evaluation in zip(together, evaluations, strict=True)}
    for loop, r in zip(loops, rounds, strict=True):
        loop.evaluate(r, done.get(id(loop)))
