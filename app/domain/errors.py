"""The one domain error: a business rule refused a change."""

from __future__ import annotations


class RuleViolation(Exception):
    """A rule refused the change. `message` is short and written for the model to read."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
