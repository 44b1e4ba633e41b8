"""A few devices of one method in memory, run by the real device loop and intake.

For tests and for trying a method out: every round the devices act together (``act_together``:
fuse → evaluate → train → share, the runtimes' own order) and every share is encoded by the wire
codec and taken in by each neighbour's ``Intake`` (its checks, then the method's ``check``), as in
the simulators — only without links, clocks or sockets: what a device shares in round r reaches
its neighbours before round r + 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import networkx as nx
import torch
from torch import nn

from p2pfed.algorithms import Algorithm, DeviceContext, Payload
from p2pfed.data import FederatedDataset
from p2pfed.device import DeviceLoop, Intake, IntakeRules, Outgoing, act_together, merge_parts
from p2pfed.device.loop import begin_fusion
from p2pfed.learning.model import build_model
from p2pfed.learning.training import TrainingConfig
from p2pfed.results.recorder import Recorder
from p2pfed.scenario.loader import method_class
from p2pfed.scenario.randomness import int_seed, stream, torch_stream
from p2pfed.transport.signing import Signing

MAX_MESSAGE_BYTES = 64 * 2**20


def make_algorithms(method: type[Algorithm] | str, dataset: FederatedDataset, options: dict[str, Any] | None = None,
                    *, seed: int = 0, rounds: int = 10, hidden: Sequence[int] = (32,),
                    model: nn.Module | None = None, training: TrainingConfig | None = None,
                    shared: dict[str, Any] | None = None) -> list[Algorithm]:
    """One instance of ``method`` per device of ``dataset``, built as a run builds them: every
    device from the same initial weights (``model``, copied, or an MLP of ``hidden`` units drawn
    from ``seed``), its own random streams named after its id, one memo table for all."""
    import copy

    cls = method_class(method) if isinstance(method, str) else method
    opts = cls.Options.model_validate(options or {})
    template = model if model is not None else build_model(
        dataset.num_features, dataset.num_classes, list(hidden), seed=int_seed(seed, "model-init"))
    shared = {} if shared is None else shared
    algos = []
    for d in dataset.devices:
        ctx = DeviceContext(device=d, num_classes=dataset.num_classes, model=copy.deepcopy(template),
                            training=training or TrainingConfig(), rng=stream(seed, "device", d.device_id),
                            torch_generator=torch_stream(seed, "device", d.device_id), rounds=rounds,
                            model_rng=torch_stream(seed, "device-model", d.device_id),
                            model_name="mlp" if model is None else type(model).__name__,
                            shared=shared, model_seed=int_seed(seed, "model-init"))
        algos.append(cls(ctx, opts))
    return algos


class Federation:
    """Devices acting together in rounds over ``graph`` (default: complete), their shares taken
    in by every neighbour's intake before the next round."""

    def __init__(self, algorithms: Sequence[Algorithm], graph: nx.Graph | None = None, *, batched: bool = False,
                 split_parts: bool = False, period_s: float = 1.0, evaluate_when: str = "after-fusion",
                 max_message_bytes: int = MAX_MESSAGE_BYTES, precision: str = "float32",
                 signing: Signing | None = None) -> None:
        """``batched``: the runtimes' batched arithmetic (equal to one device at a time to float
        rounding); ``split_parts``: every part of a share its own message, as over contacts;
        ``period_s``: simulated seconds per round (a round's clock is ``round * period_s``);
        ``precision``: the wire precision of shared float tensors (``engine.precision``);
        ``signing``: devices sign what they share and check what they receive
        (``security.sign_artifacts``; None: unsigned)."""
        n = len(algorithms)
        self.algorithms = list(algorithms)
        self.graph = nx.complete_graph(n) if graph is None else graph
        self.batched = batched
        self.period_s = period_s
        self.now = 0.0
        self.recorder = Recorder(n)
        self.loops = [DeviceLoop(i, a, self.recorder, clock=lambda: self.now, max_message_bytes=max_message_bytes,
                                 neighbours=cast("Callable[[], list[int]]",
                                                 lambda i=i: sorted(self.graph.neighbors(i))),
                                 split_parts=split_parts,
                                 evaluate_when=evaluate_when, precision=precision,
                                 signer=None if signing is None else signing.signers[i])
                      for i, a in enumerate(self.algorithms)]
        keyring = None if signing is None else signing.keyring
        self.intakes = [Intake(i, a, self.recorder, IntakeRules(max_message_bytes, num_devices=n, keyring=keyring))
                        for i, a in enumerate(self.algorithms)]
        self.next_round = 0
        self.shares: list[list[Outgoing]] = [[] for _ in self.algorithms]   # the last round's

    def round(self, *, train: Sequence[bool] | None = None, evaluate: bool = False) -> list[list[Outgoing]]:
        """The next round: every device acts, then its shares reach its neighbours."""
        r = self.next_round
        self.now = r * self.period_s
        takes_part = [True] * len(self.loops) if train is None else list(train)
        self.shares = act_together(self.loops, r, train=takes_part, evaluate=evaluate, batched=self.batched)
        for src, outgoing in enumerate(self.shares):
            for out in outgoing:
                for dst in sorted(self.graph.neighbors(src)):
                    if out.to is None or out.to == dst:
                        self.recorder.sent(src, len(out.data), r)
                        self.intakes[dst].take(out.data, link=src, now=self.now, round=r)
        self.next_round += 1
        return self.shares

    def run(self, rounds: int | Iterable[int], *, evaluate: bool = False) -> Federation:
        """``rounds`` more rounds (a count, or a range whose length counts)."""
        count = rounds if isinstance(rounds, int) else len(list(rounds))
        for _ in range(count):
            self.round(evaluate=evaluate)
        return self

    def evaluations(self) -> list[float]:
        """Each device's macro-F1 at its last evaluation."""
        return [e.f1_macro for e in self.recorder.last_evaluations]

    def state_dict(self) -> dict[str, Any]:
        return {"next_round": self.next_round, "devices": [loop.state_dict() for loop in self.loops]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next_round = int(state["next_round"])
        for loop, saved in zip(self.loops, state["devices"], strict=True):
            loop.load_state_dict(saved)


def train_once(algorithm: Algorithm, round: int) -> None:
    """The device's training in ``round`` as a runtime runs it for one device alone."""
    job = algorithm.train(round)
    if job is not None:
        job.run()


def fuse_once(algorithm: Algorithm, round: int, now: float) -> bool:
    """The device's fusion of the payloads it holds, as a runtime runs it for one device alone;
    False when there was nothing new or the method was not ready."""
    pending = begin_fusion(algorithm, round, now)
    if pending is None:
        return False
    job = pending.job()
    if job is not None:
        job.run()
    return True


def whole_share(algorithm: Algorithm, round: int) -> Payload | None:
    """The device's share as one message, as links that never cut a transfer carry it (its
    unaddressed parts merged)."""
    shared = algorithm.share(round)
    parts = [] if shared is None else [shared] if isinstance(shared, Payload) else list(shared)
    merged = merge_parts(parts)
    return merged[0] if merged else None


def model_parameters(algorithm: Algorithm) -> dict[str, torch.Tensor]:
    """A copy of the device's evaluated model's parameters (for comparisons)."""
    return {k: v.detach().clone() for k, v in algorithm.evaluated_model().state_dict().items()}


__all__ = ["Federation", "fuse_once", "make_algorithms", "model_parameters", "train_once", "whole_share"]
