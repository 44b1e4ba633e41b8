"""Where methods' offloaded work runs (``ctx.offload``): here when first needed, or in a helper
process on a spare core while the simulation goes on.

A method sends work it will need later — FedSub its K sweeps, a user's method anything
module-level and pure — with ``submit(fn, *args)`` or ``submit_many(fn, items, **kwargs)`` and
gets a future. The runtime decides where it runs:

- ``ComputeHere`` (``engine.batched_training: false``): each request at once, where submitted.
- ``ComputeWhenAsked`` (every other run): nothing runs until a result is asked for; then
  every request waiting is computed, those of one function and keyword arguments in one call.
  Devices acting at one instant all submit before any asks, so their requests stack — at no cost
  in results, since ``submit_many``'s functions give each item the same result whatever else it
  is computed with.
- ``HelperProcess`` (a contact run with batch windows, ``engine.offload``): a step's requests are
  known when it starts and wanted when its window ends, so they go to one spawned helper process
  and the simulation goes on; the answer is collected at the window's end, usually long done.
  When an answer is wanted and not back yet, the simulation does not wait idle: it takes the
  newest unanswered requests back and computes them itself (the helper skips them), so the two
  processes share the work whichever has more. Results are equal to computing everything here.

The requests travel over a plain pipe written by the simulation's own thread: an executor's queue
threads, competing for the interpreter lock at every request, made the contact run slower than
without the helper (187 s against 182 s for the first 1.5 hours of
``scenarios/synthetic-rwp-1000.yaml``, measured; 137 s over the pipe). In the helper a reader
thread takes requests off the pipe as they come, so a request never waits for the computation of
the one before it to be written. Synchronous rounds compute here: splitting a round's work with a
helper, where the round must wait for the helper's half, was measured slower (the quickstart's
first 30 FedSub rounds: 6.7 s against 3.8 s; 10 rounds at 1,000 devices: 29.6 s against 28.0 s).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, TypeVar

T = TypeVar("T")
MAX_BATCH = 4    # requests the helper computes in one call (one taken back meanwhile is lost work)

Request = tuple[Callable[..., list[Any]], list[Any], dict[str, Any]]


def _apply(calls: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
    """``submit``'s calls as one ``submit_many`` request: each call's result, in order."""
    return [fn(*args, **kwargs) for fn, args, kwargs in calls]


def _group_key(fn: Callable[..., Any], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    return (fn, tuple(sorted(kwargs.items())))


def compute_together(requests: Sequence[Request]) -> list[list[Any] | BaseException]:
    """Each request's results, the requests of one function and keyword arguments computed in
    one call (an exception is the answer of every request it concerns)."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, (fn, _, kwargs) in enumerate(requests):
        groups.setdefault(_group_key(fn, kwargs), []).append(i)
    out: list[list[Any] | BaseException] = [[] for _ in requests]
    for members in groups.values():
        fn, _, kwargs = requests[members[0]]
        try:
            results = fn([item for i in members for item in requests[i][1]], **kwargs)
        except Exception as error:   # raised by whoever asks for one of these results
            for i in members:
                out[i] = error
            continue
        start = 0
        for i in members:
            size = len(requests[i][1])
            out[i] = list(results[start:start + size])
            start += size
    return out


class _Answer:
    """A request's future: ``result()`` asks the executor for it (once)."""

    def __init__(self, executor: _Executor, number: int, single: bool) -> None:
        self._executor, self._number, self._single = executor, number, single
        self._value: Any = None
        self._known = False

    def result(self) -> Any:
        if not self._known:
            self._value = self._executor._result(self._number)
            self._known = True
        return self._value[0] if self._single else self._value


class _Executor:
    """What both executors share: numbered requests, ``submit`` as a one-call ``submit_many``."""

    def __init__(self) -> None:
        self._sent = 0
        self._requests: dict[int, Request] = {}   # not answered yet

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> _Answer:
        return self._request((_apply, [(fn, args, kwargs)], {}), single=True)

    def submit_many(self, fn: Callable[..., list[T]], items: Sequence[Any], **kwargs: Any) -> _Answer:
        return self._request((fn, list(items), dict(kwargs)), single=False)

    def _request(self, request: Request, single: bool) -> _Answer:
        number = self._sent
        self._sent += 1
        self._requests[number] = request
        self._sent_off(number, request)
        return _Answer(self, number, single)

    def _sent_off(self, number: int, request: Request) -> None:
        """A new request (the helper sends it off now)."""

    def _result(self, number: int) -> list[Any]:
        raise NotImplementedError

    def stats(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        """Stop whatever runs elsewhere (nothing here)."""


class ComputeWhenAsked(_Executor):
    """Requests wait until a result is asked for; then all those waiting are computed here, the
    ones of one function and keyword arguments in one call."""

    def __init__(self) -> None:
        super().__init__()
        self._answers: dict[int, list[Any] | BaseException] = {}

    def _result(self, number: int) -> list[Any]:
        if number not in self._answers:
            waiting = sorted(self._requests)
            for n, answer in zip(waiting, compute_together([self._requests[n] for n in waiting]), strict=True):
                self._answers[n] = answer
            self._requests.clear()
        answer = self._answers.pop(number)
        if isinstance(answer, BaseException):
            raise answer
        return answer


class HelperProcess(_Executor):
    """One helper process (started on first use) that computes requests while the caller goes
    on; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.items_sent = 0        # items sent to the helper
        self.items_taken_back = 0  # sent, then computed here while waiting for them
        self.waited_s = 0.0        # wall seconds spent on answers not back yet
        self._process: Any = None
        self._pipe_out: Connection | None = None
        self._pipe_in: Connection | None = None
        self._received: dict[int, list[Any] | BaseException] = {}
        self.failed: str | None = None   # why the helper stopped working (then all runs here)

    def stats(self) -> dict[str, float]:
        """What ``summary.json`` reports of the helper (``offload``)."""
        return {"items_sent": self.items_sent, "items_taken_back": self.items_taken_back,
                "waited_s": round(self.waited_s, 3)}

    def _sent_off(self, number: int, request: Request) -> None:
        if self.failed is not None:
            return
        try:
            if self._pipe_out is None:
                self._start()
            self._collect()
            assert self._pipe_out is not None
            self._pipe_out.send((number, request))
            self.items_sent += len(request[1])
        except (OSError, EOFError, AttributeError, TypeError) as error:   # also: a request that does not pickle
            self._give_up(error)

    def _result(self, number: int) -> list[Any]:
        """The answer to request ``number``. While it is not back and more requests are waiting
        than the helper computes at once, this process takes the newest off its hands (the
        helper is told to skip it) and computes it."""
        if self.failed is None:
            started = time.perf_counter()
            try:
                self._collect()
                while number not in self._received:
                    waiting = [m for m in self._requests if m not in self._received]
                    if len(waiting) <= MAX_BATCH:   # the helper is likely computing these: wait
                        self._collect(block=True)
                        continue
                    newest = waiting[-1]
                    assert self._pipe_out is not None
                    self._pipe_out.send(("skip", newest))
                    self._received[newest] = compute_together([self._requests[newest]])[0]
                    self.items_taken_back += len(self._requests[newest][1])
                    self._collect()
            except (OSError, EOFError) as error:
                self._give_up(error)
            self.waited_s += time.perf_counter() - started
        request = self._requests.pop(number)
        outcome = self._received.pop(number, None)
        if outcome is None:   # the helper is gone: computed here
            outcome = compute_together([request])[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _collect(self, block: bool = False) -> None:
        """Read the answers already back (they would fill the pipe), with ``block`` at least
        one; one to a request already answered here (taken back) is dropped."""
        assert self._pipe_in is not None
        while block or self._pipe_in.poll():
            block = False
            number, outcome = self._pipe_in.recv()
            if number in self._requests and number not in self._received:
                self._received[number] = outcome

    def _give_up(self, error: BaseException) -> None:
        """The helper could not start or stopped (e.g. a script without the ``if __name__ ==
        "__main__"`` guard that a spawned process needs): warn once, compute here from now on."""
        self.failed = f"{type(error).__name__}: {error}"
        warnings.warn(f"the offload helper process stopped ({self.failed}); computing its work in the "
                      "simulation's process (engine.offload: false does so from the start)",
                      RuntimeWarning, stacklevel=4)
        self.close()

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        requests_in, self._pipe_out = ctx.Pipe(duplex=False)
        self._pipe_in, answers_out = ctx.Pipe(duplex=False)
        self._process = ctx.Process(target=_serve, args=(requests_in, answers_out), daemon=True,
                                    name="p2pfed-offload-helper")
        self._process.start()
        requests_in.close()
        answers_out.close()

    def close(self) -> None:
        """Stop the helper process (a later request starts a new one, unless it failed)."""
        if self._pipe_out is None:
            return
        assert self._pipe_in is not None
        try:
            self._pipe_out.send(None)
            while self._process.is_alive():   # it answers what is left first: drain the pipe
                if self._pipe_in.poll(0.05):
                    self._pipe_in.recv()
        except (OSError, EOFError):
            pass
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.terminate()
        self._pipe_out.close()
        self._pipe_in.close()
        self._pipe_out = self._pipe_in = self._process = None


def _serve(requests: Connection, answers: Connection) -> None:
    """The helper's loop: a reader thread queues the requests as they arrive (and notes those
    taken back); this thread computes the requests waiting, up to ``MAX_BATCH`` together, and
    sends each answer back."""
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"    # the two processes already fill the two cores
    sys.setswitchinterval(1e-4)   # the reader gets the lock soon after a request arrives
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
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
        batch: list[tuple[int, Request]] = []
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
        outcomes = compute_together([request for _, request in batch])
        for (number, _), outcome in zip(batch, outcomes, strict=True):
            answers.send((number, outcome))


class ComputeHere(_Executor):
    """Every request computed at once, where it is submitted: a run one device at a time
    (``engine.batched_training: false``), the reference the others equal."""

    def __init__(self) -> None:
        super().__init__()
        self._answers: dict[int, list[Any] | BaseException] = {}

    def _sent_off(self, number: int, request: Request) -> None:
        self._answers[number] = compute_together([self._requests.pop(number)])[0]

    def _result(self, number: int) -> list[Any]:
        answer = self._answers.pop(number)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def make_offload(*, helper: bool, batched: bool) -> _Executor:
    """The executor a run uses: a helper process (a contact run with batch windows and a spare
    core), every request computed together when first asked for (batched runs), or each at once
    (a run one device at a time)."""
    if helper:
        return HelperProcess()
    return ComputeWhenAsked() if batched else ComputeHere()
