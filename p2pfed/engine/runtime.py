"""What one driver needs of a simulated runtime (synchronous rounds, or contacts): start it or
restore it, advance it to a point where it can stop, save its state, close it."""

from __future__ import annotations

from typing import Any, Protocol


class Runtime(Protocol):
    """A runtime that can stop after each of its ``total`` steps (rounds, or evaluations over
    contacts); ``unit``, ``length`` and ``position`` describe its progress for a progress bar."""

    unit: str

    @property
    def total(self) -> int: ...

    @property
    def done(self) -> int:
        """Steps done."""

    @property
    def length(self) -> int: ...

    def position(self) -> int: ...

    def now(self) -> float:
        """Simulated time."""

    def start(self) -> None:
        """Start a new run (``load_state_dict`` instead continues a saved one)."""

    def advance(self, to: int) -> None:
        """Run until ``to`` steps are done."""

    def state_dict(self) -> dict[str, Any]:
        """Checkpoint data after ``advance``."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...
