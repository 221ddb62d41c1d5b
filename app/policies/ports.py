"""What the policy routes need of the gate (app/eval/policy_gate.py runs it): the API sits
below the evaluation machinery, so it knows only this."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class PolicyTests(Protocol):
    async def start(self, version: int, tasks: Sequence[Any], actor: str) -> str:
        """Check the tasks, record the test as running, run it in the background; its id."""
        ...
