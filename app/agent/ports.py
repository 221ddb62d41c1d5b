"""What the graph needs from the rest of the service, as narrow interfaces."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from app.tools.results import Artifact, ObservationFormat


class WriteLedger(Protocol):
    async def summarize(self, customer_id: str | None, name: str, args: dict[str, Any]) -> str:
        """A one-line human summary of a pending write, for the confirmation card."""
        ...

    async def recorded_result(
        self,
        idempotency_key: str,
        *,
        name: str,
        args: Mapping[str, Any],
        customer_id: str | None,
        observation_format: ObservationFormat,
    ) -> tuple[str, Artifact] | None:
        """(content, artifact) of a write that already ran, rebuilt from its record; None
        when it did not run."""
        ...
