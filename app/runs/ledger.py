"""The graph's view of the write ledger (`tool_executions`), backed by the pool."""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from app.db.writes import recorded_outcome
from app.tools.registry import summarize_write


class PgWriteLedger:
    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool

    async def summarize(self, customer_id: str | None, name: str, args: dict[str, Any]) -> str:
        return await summarize_write(self.pool, customer_id, name, args)

    async def recorded_outcome(self, idempotency_key: str) -> str | None:
        return await recorded_outcome(self.pool, idempotency_key)
