"""What the graph needs from the rest of the service, as narrow interfaces."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from app.tools.results import Artifact, Assessment, ObservationFormat


class WriteLedger(Protocol):
    async def assess(self, customer_id: str | None, name: str, args: dict[str, Any]) -> Assessment:
        """Whether a pending write is asked for, its card's line, and its rule's refusal
        when it cannot succeed now."""
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
