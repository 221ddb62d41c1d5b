"""`cs-agent mcp serve-shop`: the demo shop's tools as an MCP server (the `mcp` SDK, over
streamable HTTP), the example a company copies to wrap its own backend.

Every tool but the conversation's own (app/tools/registry.py `CONVERSATION_TOOLS`) is
served with the schema, description and rules the built-in one has. Whom a call is for is
the `X-Customer-Token` the agent signs (`sub`, checked against the secret and this
server's name as `aud`); without a valid one, the call is a guest's and the shop's rules
refuse it. Writes honour the agent's idempotency key (`_meta["cs-agent/idempotency-key"]`):
it is the turn of the local write, so the same key and arguments are one write, and a
resend gets the first result from the shop's own ledger.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import jwt
import mcp_types as types
import structlog
import uvicorn
from langchain_core.messages import ToolMessage
from langgraph.prebuilt import ToolRuntime
from langgraph.types import Command
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from psycopg_pool import AsyncConnectionPool
from pydantic import TypeAdapter

from app.actions.mcp_source import IDEMPOTENCY_META, TOKEN_HEADER
from app.config import Settings
from app.db.pool import open_pool
from app.identity import AgentContext
from app.notify.codes import default_identity_codes
from app.tools.registry import CONVERSATION_TOOLS, SPECS
from app.tools.spec import ToolDeps

log = structlog.get_logger(__name__)
SHOP_TOOLS = tuple(name for name in SPECS if name not in CONVERSATION_TOOLS)


class LazyPool:
    """The shop's pool, opened at the first call (the database may come after the server)."""

    def __init__(self, settings: Settings, url: str) -> None:
        self.settings, self.url = settings, url
        self._pool: AsyncConnectionPool[Any] | None = None
        self._deps: ToolDeps | None = None
        self._lock = asyncio.Lock()

    async def deps(self) -> ToolDeps:
        async with self._lock:
            if self._deps is None:
                self._pool = await open_pool(self.url, self.settings, name="mcp-shop")
                self._deps = ToolDeps(pool=self._pool, codes=default_identity_codes(self._pool))
            return self._deps

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()


def shop_server(pools: LazyPool, *, name: str, secret: str) -> Server[Any]:
    listed = [_listed(tool_name) for tool_name in SHOP_TOOLS]
    fmt = pools.settings.observation_format

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        spec = SPECS.get(params.name)
        if spec is None or params.name in CONVERSATION_TOOLS:
            return _result(f"Error: there is no tool named {params.name!r}.", error=True)
        headers = getattr(ctx.request, "headers", None) or {}
        customer = _customer(headers.get(TOKEN_HEADER.lower()), secret, name)
        key = (ctx.meta or {}).get(IDEMPOTENCY_META)
        key = key if isinstance(key, str) and key else None
        tool = spec.tool(await pools.deps()).bound(fmt)
        call_id = f"mcp-{uuid.uuid4().hex[:12]}"
        args = dict(params.arguments or {})
        output = await tool.ainvoke(
            {
                "name": spec.name,
                "args": {**args, "runtime": _runtime(customer, key, call_id)},
                "id": call_id,
                "type": "tool_call",
            }
        )
        return _output(output)

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)


def _listed(tool_name: str) -> types.Tool:
    spec = SPECS[tool_name]
    tool = spec.tool(ToolDeps(pool=None, codes=None))  # type: ignore[arg-type]  # schema only
    model = tool.tool_call_schema
    # what the model reads today
    schema = model if isinstance(model, dict) else TypeAdapter(model).json_schema()
    read = spec.access == "read"
    return types.Tool(
        name=tool_name,
        title=spec.label,
        description=tool.description,
        input_schema=schema,
        annotations=types.ToolAnnotations(
            read_only_hint=read,
            destructive_hint=not read,
            idempotent_hint=True,  # reads, and writes keyed by the agent's idempotency key
        ),
    )


def _customer(token: str | None, secret: str, audience: str) -> str | None:
    if not token:
        return None
    try:
        claims = jwt.decode(token, secret, algorithms=["HS256"], audience=audience)
    except jwt.PyJWTError:
        log.warning("refused a customer token")
        return None
    sub = claims.get("sub")
    return sub if isinstance(sub, str) and sub else None


def _runtime(customer: str | None, key: str | None, call_id: str) -> ToolRuntime[Any, Any]:
    """The runtime a built-in tool reads: whom the call is for, and as the turn, the
    agent's idempotency key (so the same key and arguments are one write)."""
    context = AgentContext(
        user_id=customer or "mcp-guest",
        role="customer" if customer else "guest",
        thread_id=f"{customer or 'mcp-guest'}:mcp-shop",
    )
    return ToolRuntime(
        state={"messages": [], "turn_id": key or call_id, "verified_user_id": customer},
        context=context,
        config={},
        stream_writer=lambda _: None,
        tool_call_id=call_id,
        store=None,
    )


def _output(output: Any) -> types.CallToolResult:
    if isinstance(output, Command):  # a result that also changes the conversation
        update = output.update if isinstance(output.update, dict) else {}
        found = [m for m in update.get("messages", []) if isinstance(m, ToolMessage)]
        output = found[0] if found else None
    if not isinstance(output, ToolMessage):
        return _result("Error: the request could not be completed.", error=True)
    text = output.content if isinstance(output.content, str) else str(output.content)
    return _result(text, error=output.status == "error")


def _result(text: str, *, error: bool) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


async def serve_shop(settings: Settings, *, host: str, port: int, name: str, secret: str) -> None:
    url = settings.database_url
    if not url:
        raise ValueError("serve-shop needs DATABASE_URL (the shop's database)")
    pools = LazyPool(settings, url)
    server = shop_server(pools, name=name, secret=secret)
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    log.info("serving the shop over MCP", url=f"http://{host}:{port}/mcp", tools=len(SHOP_TOOLS))
    try:
        await uvicorn.Server(config).serve()
    finally:
        await pools.close()
