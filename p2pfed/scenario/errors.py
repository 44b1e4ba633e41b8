"""The error every scenario problem is reported as: one 'file: field: problem' line each."""

from __future__ import annotations


class ScenarioError(ValueError):
    """A scenario that cannot run; ``problems`` holds one 'file: field: message' line each."""

    def __init__(self, problems: list[str] | str) -> None:
        # a single message is one problem (a reader given this class as its error type passes one)
        self.problems = [problems] if isinstance(problems, str) else problems
        super().__init__("\n".join(problems))
