"""A compiled agent graph on the test database, the real tools and the scripted model.

The graph checkpoints through the service's `PostgresCheckpointer`, and each run goes
through `held_until_needed()` as the service runs a turn, so the crash, restart and
interrupt tests cover the held-back checkpoints too."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool
from langgraph.store.postgres.aio import AsyncPostgresStore
from langgraph.types import Command
from psycopg_pool import AsyncConnectionPool

from app.agent.graph import Graph, build_graph, run_config
from app.config import Settings
from app.db.checkpointer import PostgresCheckpointer, run_batching
from app.db.transfer import import_dir
from app.identity import AgentContext, Role
from app.threads.archive import PgTranscriptArchive
from app.tools.registry import PostgresWriteLedger, build_tools
from tests.fakellm import ScriptedModelServer
from tests.fakes.fixtures import chat_model

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tau_small"


async def load_small_shop(pool: AsyncConnectionPool[Any]) -> None:
    await import_dir(pool, FIXTURE, replace=True)


@dataclass
class Conversation:
    graph: Graph
    settings: Settings
    user_id: str = "noah_brown_6181"
    role: Role = "customer"
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def thread_id(self) -> str:
        return f"{self.user_id}:{self.session_id}"

    @property
    def context(self) -> AgentContext:
        return AgentContext(user_id=self.user_id, role=self.role, thread_id=self.thread_id)

    @property
    def config(self) -> Any:
        return run_config(self.thread_id, self.settings)

    async def say(self, text: str) -> dict[str, Any]:
        message = HumanMessage(content=text, id=str(uuid.uuid4()))
        return await self._run({"incoming": message})

    async def resume(self, decision: str | None = None) -> dict[str, Any]:
        return await self._run(None if decision is None else Command(resume={"decision": decision}))

    async def _run(self, graph_input: Any) -> dict[str, Any]:
        assert isinstance(self.graph.checkpointer, PostgresCheckpointer)
        async with run_batching(self.graph.checkpointer):
            result: dict[str, Any] = await self.graph.ainvoke(
                graph_input, self.config, context=self.context, durability="sync"
            )
            return result

    async def state(self) -> Any:
        return await self.graph.aget_state(self.config)


def make_graph(
    pool: AsyncConnectionPool[Any],
    server: ScriptedModelServer,
    settings: Settings,
    *,
    extra_read_tools: list[BaseTool] | None = None,
) -> Graph:
    tools = build_tools(pool)
    return build_graph(
        model=chat_model(server, streaming=True),
        read_tools=[*tools.read, *(extra_read_tools or [])],
        write_tools=tools.write,
        checkpointer=PostgresCheckpointer(pool),
        settings=settings,
        ledger=PostgresWriteLedger(pool),
        store=AsyncPostgresStore(pool),
        archive=PgTranscriptArchive(pool),
    )


async def fetch_one(pool: AsyncConnectionPool[Any], sql: str, *args: Any) -> dict[str, Any]:
    async with pool.connection() as conn:
        cur = await conn.execute(sql, args)
        row = await cur.fetchone()
        assert row is not None
        return dict(row)


async def fetch_all(pool: AsyncConnectionPool[Any], sql: str, *args: Any) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute(sql, args)
        return [dict(r) for r in await cur.fetchall()]
