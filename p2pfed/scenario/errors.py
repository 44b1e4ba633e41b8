"""The error every scenario problem is reported as: one 'file: field: problem' line each."""

from __future__ import annotations


class ScenarioError(ValueError):
    """A scenario that cannot run; ``problems`` holds one 'file: field: message' line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))
