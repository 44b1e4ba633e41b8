"""Live logging of a run: a small callback interface, and a TensorBoard adapter.

A simulation calls every callback with each ``rounds.csv`` row as soon as its evaluation is
complete, and with ``summary.json`` at the end; an MLflow or Weights & Biases adapter is a
subclass of ``Callback`` of a few lines (docs/how-to/python-api.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from p2pfed.extras import require


class Callback:
    """Override what you need: both do nothing here."""

    def on_evaluation(self, row: dict[str, Any]) -> None:
        """A ``rounds.csv`` row (round, sim_time_s, the metrics, cumulative traffic), once every
        device of that round or interval has been evaluated."""

    def on_end(self, summary: dict[str, Any]) -> None:
        """The run's ``summary.json``."""


class TensorBoard(Callback):
    """Each numeric column of each row as a scalar under ``p2pfed/<column>``, step = the round;
    the summary as text at the end (``torch.utils.tensorboard``; needs the ``tensorboard``
    package: ``pip install 'p2pfed[tensorboard]'``)."""

    def __init__(self, log_dir: str | Path) -> None:
        tensorboard = require("torch.utils.tensorboard", extra="tensorboard", package="TensorBoard",
                              needed_by="--log tensorboard")
        self.writer = tensorboard.SummaryWriter(log_dir=str(log_dir))

    def on_evaluation(self, row: dict[str, Any]) -> None:
        step = int(row["round"])
        for key, value in row.items():
            if key != "round" and isinstance(value, (int, float)):
                self.writer.add_scalar(f"p2pfed/{key}", value, global_step=step)
        self.writer.flush()

    def on_end(self, summary: dict[str, Any]) -> None:
        self.writer.add_text("summary", "```\n" + json.dumps(summary, indent=1, default=str) + "\n```")
        self.writer.close()


LOGGERS = {"tensorboard": TensorBoard}


def parse_log(spec: str) -> Callback:
    """``--log KIND:DIR`` (e.g. ``tensorboard:runs/tb``) as a callback."""
    kind, sep, where = spec.partition(":")
    if not sep or not where or kind not in LOGGERS:
        raise ValueError(f"--log {spec!r}: expected KIND:DIR with KIND one of {', '.join(LOGGERS)}")
    return LOGGERS[kind](where)


class Rows:
    """Hands each newly completed ``rounds.csv`` row of a recorder to the callbacks, once."""

    def __init__(self, callbacks: Sequence[Callback]) -> None:
        self.callbacks = list(callbacks)
        self.sent = 0

    def emit(self, rows: list[dict[str, Any]]) -> None:
        for row in rows[self.sent:]:
            for callback in self.callbacks:
                callback.on_evaluation(dict(row))
        self.sent = len(rows)

    def end(self, summary: dict[str, Any]) -> None:
        for callback in self.callbacks:
            callback.on_end(summary)
