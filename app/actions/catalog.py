"""Every source of the actions file, opened at start, and what the rest of the service
needs from them: the tools (reads and writes), the confirmation line of a pending remote
write, the result of one a crash left behind, the page's labels, and each source's state
for `GET /readyz`.

Without an actions file none of this exists: the graph, the ledger and the probes are the
built-in ones, and a turn pays nothing for the feature.
"""

from __future__ import annotations

import asyncio
import string
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from langchain_core.tools import BaseTool
from psycopg_pool import AsyncConnectionPool

from app.actions import calls, ledger
from app.actions.file import ActionsFile, SourceSettings
from app.actions.identity import customer_token
from app.actions.ledger import CallRecord
from app.actions.mcp_source import McpSource
from app.actions.openapi_source import OpenApiSource
from app.actions.remote import RemoteTool, Source
from app.actions.tool import action_tool
from app.agent.ports import WriteLedger
from app.tools.registry import ToolSet
from app.tools.results import Artifact, Assessment, ObservationFormat, argument_ids

log = structlog.get_logger(__name__)
PROBE_TIMEOUT_S = 1.0  # a down source is asked again by /readyz, for at most this long


class ActionsError(ValueError):
    """The file and the servers disagree with the service (a name used twice)."""


def source_of(settings: SourceSettings) -> Source:
    return McpSource(settings) if settings.kind == "mcp" else OpenApiSource(settings)


@dataclass
class Actions:
    pool: AsyncConnectionPool[Any] | None  # None: only listed and checked (the CLI)
    sources: list[Source]
    tools: dict[str, RemoteTool] = field(default_factory=dict)
    by_tool: dict[str, Source] = field(default_factory=dict)

    @classmethod
    async def open(
        cls, pool: AsyncConnectionPool[Any] | None, file: ActionsFile, taken: Collection[str]
    ) -> Actions:
        """Connect to every source at once; one that does not answer stays down and the
        service starts anyway. A tool name already taken (a built-in tool, another
        source's) raises ActionsError."""
        actions = cls(pool, [source_of(s) for s in file.sources])
        await asyncio.gather(*(s.open() for s in actions.sources))
        owner = dict.fromkeys(taken, "the built-in tools")
        for source in actions.sources:
            for tool in source.tools():
                if tool.name in owner:
                    await actions.close()
                    raise ActionsError(
                        f"tool {tool.name!r} of source {source.settings.name!r} has the name "
                        f"of a tool of {owner[tool.name]}"
                    )
                owner[tool.name] = f"source {source.settings.name!r}"
                actions.tools[tool.name] = tool
                actions.by_tool[tool.name] = source
        return actions

    def langchain_tools(self) -> tuple[list[BaseTool], list[BaseTool]]:
        """(reads, writes) for the graph."""
        assert self.pool is not None, "the graph's tools need the pool"
        pool = self.pool
        built: dict[str, BaseTool] = {
            n: action_tool(t, self.by_tool[n], pool) for n, t in self.tools.items()
        }
        reads = [built[n] for n, t in self.tools.items() if t.kind == "read"]
        writes = [built[n] for n, t in self.tools.items() if t.kind == "write"]
        return reads, writes

    def joined(self, builtin: ToolSet) -> ToolSet:
        """The built-in tools and these: reads, then writes, the built-in ones first."""
        reads, writes = self.langchain_tools()
        return ToolSet(read=[*builtin.read, *reads], write=[*builtin.write, *writes])

    async def statuses(self) -> dict[str, str]:
        """Each source, `ok` or `down`; a down one is asked again (briefly)."""
        down = [s for s in self.sources if s.status == "down"]
        if down:
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    await asyncio.gather(*(s.check() for s in down))
            except TimeoutError:
                pass
        return {s.settings.name: s.status for s in self.sources}

    def labels(self) -> dict[str, dict[str, str]]:
        """The page's label of each remote tool (the file's, else the tool's title)."""
        return {
            name: {"label": tool.label or f"Using {name} …"} for name, tool in self.tools.items()
        }

    def confirm_line(self, name: str, args: Mapping[str, Any]) -> str:
        tool = self.tools[name]
        shown = {k: v for k, v in args.items() if k != tool.customer_argument}
        if tool.confirm:
            try:
                return string.Formatter().vformat(tool.confirm, (), _Known(shown))
            except (ValueError, IndexError, AttributeError):
                pass
        listed = ", ".join(f"{k}={v}" for k, v in shown.items())
        return f"Run {name} ({tool.source})" + (f" with {listed}" if listed else "")

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.sources), return_exceptions=True)


class _Known(dict[str, Any]):
    """A confirm template's fields: an argument the call lacks reads as its name."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


@dataclass(frozen=True)
class ActionsLedger:
    """The graph's `WriteLedger` with remote writes: their confirmation line, and the
    repair of one a crash cut off (its result if it came, else the unknown-outcome rules,
    never a blind resend)."""

    inner: WriteLedger
    actions: Actions

    async def assess(self, customer_id: str | None, name: str, args: dict[str, Any]) -> Assessment:
        if name in self.actions.tools:  # a remote write is always asked for; no dry run
            return Assessment(ask=True, summary=self.actions.confirm_line(name, args))
        return await self.inner.assess(customer_id, name, args)

    async def recorded_result(
        self,
        idempotency_key: str,
        *,
        name: str,
        args: Mapping[str, Any],
        customer_id: str | None,
        observation_format: ObservationFormat,
    ) -> tuple[str, Artifact] | None:
        tool = self.actions.tools.get(name)
        if tool is None:
            return await self.inner.recorded_result(
                idempotency_key,
                name=name,
                args=args,
                customer_id=customer_id,
                observation_format=observation_format,
            )
        pool = self.actions.pool
        assert pool is not None
        earlier = await ledger.prior(pool, idempotency_key)
        if earlier is None:
            return None  # never sent: the repair says it was not executed
        record = CallRecord(
            key=idempotency_key,
            thread_id="",
            actor="repair",
            customer_id=customer_id,
            tool_name=name,
            arguments=dict(args),
        )
        record = await _recorded_call(pool, record)
        args_sent = dict(record.arguments)
        source = self.actions.by_tool[name]
        secret = source.settings.identity_secret
        token = None
        if secret is not None and record.customer_id is not None:
            token = customer_token(
                secret.get_secret_value(), source.settings.name, record.customer_id
            )
        target = calls.Target(source, tool, token)
        observation = await calls.settle(pool, target, record, args_sent, earlier)
        artifact = observation.artifact(cacheable=False, more_ids=argument_ids(args))
        return observation.content("text"), artifact


async def _recorded_call(pool: AsyncConnectionPool[Any], record: CallRecord) -> CallRecord:
    """The call as it was recorded when sent: its thread, customer and the arguments that
    went out (the customer argument filled in)."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT thread_id, user_id, arguments FROM tool_executions WHERE idempotency_key = %s",
            (record.key,),
        )
        row = await cursor.fetchone()
    if row is None:
        return record
    return CallRecord(
        key=record.key,
        thread_id=row["thread_id"],
        actor=record.actor,
        customer_id=row["user_id"],
        tool_name=record.tool_name,
        arguments=row["arguments"],
    )
