"""What the graph needs from the rest of the service, as narrow interfaces."""

from __future__ import annotations

from typing import Any, Protocol


class WriteLedger(Protocol):
    async def summarize(self, customer_id: str | None, name: str, args: dict[str, Any]) -> str:
        """A one-line human summary of a pending write, for the confirmation card."""
        ...

    async def recorded_outcome(self, idempotency_key: str) -> str | None:
        """The observation recorded for a write that already ran, if it did."""
        ...
