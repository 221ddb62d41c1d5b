"""All tools, built around one pool, plus what the graph needs to confirm and repair writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool
from psycopg_pool import AsyncConnectionPool

from app.db.writes import recorded_outcome
from app.notify.codes import IdentityCodes, default_identity_codes
from app.tools.delivered import delivered_write_tools
from app.tools.handoff import handoff_write_tools
from app.tools.help import help_read_tools
from app.tools.identity import identity_read_tools, identity_write_tools
from app.tools.memory import memory_tools
from app.tools.orders import order_read_tools, order_write_tools
from app.tools.products import product_read_tools
from app.tools.shipping import arithmetic_tools
from app.tools.summaries import summarize_write

__all__ = ["WRITE_TOOL_NAMES", "PostgresWriteLedger", "ToolSet", "build_tools", "summarize_write"]

WRITE_TOOL_NAMES: frozenset[str] = frozenset(
    {
        "cancel_pending_order",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "modify_pending_order_payment",
        "modify_user_address",
        "return_delivered_order_items",
        "exchange_delivered_order_items",
        "transfer_to_human_agents",
    }
)


@dataclass(frozen=True)
class ToolSet:
    read: list[BaseTool]
    write: list[BaseTool]

    @property
    def all(self) -> list[BaseTool]:
        return [*self.read, *self.write]


def build_tools(
    pool: AsyncConnectionPool[Any], identity_codes: IdentityCodes | None = None
) -> ToolSet:
    """`identity_codes` sends guests their one-time codes; the lifespan passes the configured
    one, and without it codes only reach the outbox and the log."""
    codes = identity_codes or default_identity_codes(pool)
    read = [*identity_read_tools(pool, codes), *order_read_tools(pool), *product_read_tools(pool)]
    read += [*arithmetic_tools(), *help_read_tools(pool), *memory_tools()]
    write = [
        *order_write_tools(pool),
        *delivered_write_tools(pool),
        *identity_write_tools(pool),
        *handoff_write_tools(pool),
    ]
    if {t.name for t in write} != WRITE_TOOL_NAMES:
        raise RuntimeError("the write tools and WRITE_TOOL_NAMES disagree")
    return ToolSet(read=read, write=write)


@dataclass(frozen=True)
class PostgresWriteLedger:
    """The graph's `WriteLedger` port (app.agent.ports) over the tool tables."""

    pool: AsyncConnectionPool[Any]

    async def summarize(self, customer_id: str | None, name: str, args: dict[str, Any]) -> str:
        return await summarize_write(self.pool, customer_id, name, args)

    async def recorded_outcome(self, idempotency_key: str) -> str | None:
        return await recorded_outcome(self.pool, idempotency_key)
