"""The one error a user's data file raises: every problem as a line naming file and column."""

from __future__ import annotations

MAX_PROBLEMS = 20


class DataError(ValueError):
    """Data that cannot make a federation; ``problems`` holds one line each, of the form
    ``FILE: column 'NAME': what is wrong (line N)``."""

    def __init__(self, problems: list[str]) -> None:
        if len(problems) > MAX_PROBLEMS:
            problems = problems[:MAX_PROBLEMS] + [f"... and {len(problems) - MAX_PROBLEMS} more problems"]
        self.problems = problems
        super().__init__("\n".join(problems))
