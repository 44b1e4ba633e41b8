"""A second process for FedSub's K sweeps, so a contact run with batch windows uses two cores.

The simulation itself runs in one Python process, on one core, and FedSub's K sweeps are
independent problems that are much of its time. In a contact run with batch windows
(``asynchronous.batch_window_s``) a step's sweeps are known when the step starts and wanted only
when its window ends: :meth:`SweepHelper.submit` sends them to one spawned helper process and
the simulation goes on; the answer is collected at the window's end, usually long done.

Results are equal to computing them all here: the helper runs the same function on the same
arrays, and a sweep does not depend on what it is computed with (``choose_k_by_dbi_many``).
When an answer is wanted and not back yet, the simulation does not wait idle: it takes the
newest unanswered requests back and computes them itself (the helper skips them), so the two
processes share the work whichever has more.

The requests travel over a plain pipe, written by the simulation's own thread: an executor's
queue threads, competing for the interpreter lock at every request, made the contact run slower
than without the helper (187 s against 182 s for the first 1.5 hours of
``scenarios/synthetic-rwp-1000.yaml``, measured; 137 s over the pipe). In the helper a
reader thread takes requests off the pipe as they come, so a request never waits for the
computation of the one before it to be written.

Synchronous rounds do not use it. Splitting a round's sweeps between the two processes, where
the simulation must wait for the helper's half before the round can go on, was measured slower
than computing them all here (the quickstart's first 30 FedSub rounds: 6.7 s against 3.8 s; 10
rounds at 1,000 devices: 29.6 s against 28.0 s), and was removed.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from p2pfed.learning.clustering import Clustering, choose_k_by_dbi_many

MAX_BATCH = 4    # requests the helper computes in one call (one taken back meanwhile is lost work)


class SweepHelper:
    """One helper process (started on first use) that computes K sweeps for the simulation."""

    def __init__(self) -> None:
        self.problems_sent = 0        # problems sent to the helper
        self.problems_taken_back = 0  # sent, then computed here while waiting for them
        self.waited_s = 0.0           # wall seconds spent on answers not back yet
        self._process: Any = None
        self._requests: Connection | None = None
        self._answers: Connection | None = None
        self._sent = 0
        self._received: dict[int, Any] = {}
        self._unanswered: dict[int, tuple[list[np.ndarray], dict[str, Any]]] = {}
        self.failed: str | None = None   # why the helper stopped working (then all runs here)

    def stats(self) -> dict[str, float]:
        """What ``summary.json`` reports of the helper."""
        return {"problems_sent": self.problems_sent, "problems_taken_back": self.problems_taken_back,
                "waited_s": round(self.waited_s, 3)}

    def submit(self, point_sets: Sequence[np.ndarray], **params: Any) -> _Answer:
        """Send these sweeps to the helper; the answer's ``result()`` is their clusterings."""
        number = self._sent
        self._sent += 1
        self._unanswered[number] = (list(point_sets), params)
        if self.failed is None:
            try:
                if self._requests is None:
                    self._start()
                self._collect()
                self._requests.send((number, list(point_sets), params))
                self.problems_sent += len(point_sets)
            except (OSError, EOFError) as error:
                self._give_up(error)
        return _Answer(self, number)

    def _result(self, number: int) -> list[Clustering]:
        """The answer to request ``number``. While it is not back and more requests are waiting
        than the helper computes at once, this process takes the newest off its hands (the
        helper is told to skip it) and computes it: the two work from both ends of the queue
        instead of one waiting for the other."""
        if self.failed is None:
            started = time.perf_counter()
            try:
                self._collect()
                while number not in self._received:
                    waiting = [m for m in self._unanswered if m not in self._received]
                    if len(waiting) <= MAX_BATCH:   # the helper is likely computing these: wait
                        self._collect(block=True)
                        continue
                    newest = waiting[-1]
                    self._requests.send(("skip", newest))
                    point_sets, params = self._unanswered[newest]
                    self._received[newest] = choose_k_by_dbi_many(point_sets, **params)
                    self.problems_taken_back += len(point_sets)
                    self._collect()
            except (OSError, EOFError) as error:
                self._give_up(error)
            self.waited_s += time.perf_counter() - started
        point_sets, params = self._unanswered.pop(number)
        outcome = self._received.pop(number, None)
        if outcome is None:   # the helper is gone: computed here
            return choose_k_by_dbi_many(point_sets, **params)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _collect(self, block: bool = False) -> None:
        """Read the answers already back (they would fill the pipe), with ``block`` at least
        one; one to a request already answered here (taken back) is dropped."""
        while block or self._answers.poll():
            block = False
            number, outcome = self._answers.recv()
            if number in self._unanswered and number not in self._received:
                self._received[number] = outcome

    def _give_up(self, error: BaseException) -> None:
        """The helper could not start or stopped (e.g. a script without the ``if __name__ ==
        "__main__"`` guard that a spawned process needs): warn once, compute here from now on."""
        self.failed = f"{type(error).__name__}: {error}"
        warnings.warn(f"the K-sweep helper process stopped ({self.failed}); computing the sweeps in the "
                      "simulation's process (engine.sweep_helper: false does so from the start)",
                      RuntimeWarning, stacklevel=3)
        self.close()

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        requests_in, self._requests = ctx.Pipe(duplex=False)
        self._answers, answers_out = ctx.Pipe(duplex=False)
        self._process = ctx.Process(target=_serve, args=(requests_in, answers_out), daemon=True,
                                    name="p2pfed-sweep-helper")
        self._process.start()
        requests_in.close()
        answers_out.close()

    def close(self) -> None:
        """Stop the helper process (a later request starts a new one, unless it failed)."""
        if self._requests is None:
            return
        try:
            self._requests.send(None)
            while self._process.is_alive():   # it answers what is left first: drain the pipe
                if self._answers.poll(0.05):
                    self._answers.recv()
        except (OSError, EOFError):
            pass
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.terminate()
        self._requests.close()
        self._answers.close()
        self._requests = self._answers = self._process = None


class _Answer:
    """A request sent to the helper; ``result()`` waits for its clusterings."""

    def __init__(self, helper: SweepHelper, number: int) -> None:
        self._helper, self._number = helper, number
        self._value: list[Clustering] | None = None

    def result(self) -> list[Clustering]:
        if self._value is None:
            self._value = self._helper._result(self._number)
        return self._value


def _serve(requests: Connection, answers: Connection) -> None:
    """The helper's loop: a reader thread queues the requests as they arrive (and notes those
    taken back); this thread computes the requests waiting, up to ``MAX_BATCH`` in one call,
    and sends each answer back."""
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"    # the two processes already fill the two cores
    sys.setswitchinterval(1e-4)   # the reader gets the lock soon after a request arrives
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    skipped: set[int] = set()    # requests the simulation took back

    def read() -> None:
        while True:
            try:
                message = requests.recv()
            except EOFError:
                message = None
            if message is not None and message[0] == "skip":
                skipped.add(message[1])
                continue
            inbox.put(message)
            if message is None:
                return

    threading.Thread(target=read, daemon=True).start()
    message: Any = ()
    while message is not None:
        batch = []
        while len(batch) < MAX_BATCH:   # the requests already waiting join: problems of one size stack
            try:
                message = inbox.get(block=not batch)
            except queue.Empty:
                break
            if message is None:
                break
            if message[0] in skipped:
                skipped.discard(message[0])
            else:
                batch.append(message)
        for number, outcome in _answer_all(batch):
            answers.send((number, outcome))


def _answer_all(batch: list[tuple[int, list[np.ndarray], dict[str, Any]]]) -> list[tuple[int, Any]]:
    """Each request's clusterings, the requests with equal params computed in one call (an
    exception is the answer of every request it concerns)."""
    by_params: dict[tuple[Any, ...], list[tuple[int, list[np.ndarray], dict[str, Any]]]] = {}
    for request in batch:
        by_params.setdefault(tuple(sorted(request[2].items())), []).append(request)
    out: list[tuple[int, Any]] = []
    for requests in by_params.values():
        try:
            results = choose_k_by_dbi_many([p for _, sets, _ in requests for p in sets], **requests[0][2])
        except Exception as error:   # sent back: the simulation raises it
            out.extend((number, error) for number, _, _ in requests)
            continue
        start = 0
        for number, sets, _ in requests:
            out.append((number, results[start:start + len(sets)]))
            start += len(sets)
    return out
