"""An MCP server over streamable HTTP: one session, held open by a task of its own and
shared by every call (a new session per call would cost a handshake each time).

The session is the `mcp` SDK's `Client`. Its HTTP requests leave from the SDK's own tasks,
which copy the caller's context, so the call's customer token and whether its connection
was refused travel in a context variable to `_CallTransport`, the one place they are read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

import httpx2
import mcp_types
import structlog
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from app.actions.file import SourceSettings
from app.actions.remote import (
    Answered,
    NoAnswer,
    NotSent,
    RemoteTool,
    as_text,
    capped,
    placeholder,
    settings_for,
    without_argument,
)

log = structlog.get_logger(__name__)
IDEMPOTENCY_META = "cs-agent/idempotency-key"
TOKEN_HEADER = "X-Customer-Token"
_NOT_ANSWERED = (mcp_types.CONNECTION_CLOSED, mcp_types.REQUEST_TIMEOUT)


@dataclass
class _Call:
    token: str | None
    refused: bool = False  # the connection was refused: the request never left


_current: ContextVar[_Call | None] = ContextVar("cs_agent_mcp_call", default=None)


class _CallTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        call = _current.get()
        if call is not None and call.token:
            request.headers[TOKEN_HEADER] = call.token
        try:
            return await self.inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout):
            if call is not None:
                call.refused = True
            raise

    async def aclose(self) -> None:
        await self.inner.aclose()


class McpSource:
    def __init__(self, settings: SourceSettings) -> None:
        assert settings.mcp is not None
        self.settings = settings
        self.url = settings.mcp
        self.status: Literal["ok", "down"] = "down"
        self._listed: list[RemoteTool] | None = None
        self._holder: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[Client] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        """Connect and list the tools; a server that does not answer leaves the source
        down (its tools the file names are offered and fail until it answers)."""
        await self.check()

    def tools(self) -> list[RemoteTool]:
        if self._listed is not None:
            return self._listed
        return [placeholder(self.settings, name) for name in self.settings.tools]

    async def check(self) -> bool:
        try:
            client = await self._connected()
            async with asyncio.timeout(self.settings.timeout_s):
                tools = await _all_tools(client)
            if self._listed is None:
                self._listed = [self._tool(t) for t in tools]
            self.status = "ok"
        except Exception as error:
            log.warning("action source down", source=self.settings.name, error=type(error).__name__)
            await self._drop()
            self.status = "down"
        return self.status == "ok"

    async def call(
        self, tool: RemoteTool, args: Mapping[str, Any], *, key: str | None, token: str | None
    ) -> Answered:
        call = _Call(token)
        reset = _current.set(call)
        try:
            try:
                client = await self._connected()
            except Exception:
                self.status = "down"
                raise NotSent() from None
            try:
                async with asyncio.timeout(self.settings.timeout_s):
                    result = await client.call_tool(
                        tool.name,
                        dict(args),
                        read_timeout_seconds=self.settings.timeout_s,
                        meta={IDEMPOTENCY_META: key} if key else None,  # type: ignore[arg-type]
                    )
            except Exception as error:
                await self._drop()  # the next call opens a fresh session
                if call.refused:
                    self.status = "down"
                    raise NotSent() from None
                if isinstance(error, TimeoutError | OSError | httpx2.TransportError):
                    raise NoAnswer() from None
                if isinstance(error, MCPError) and error.code in _NOT_ANSWERED:
                    # The SDK's own word for "no answer came": its timeout, or the session
                    # closed under the call (another call's timeout drops the shared one).
                    raise NoAnswer() from None
                # a protocol error the server answered with (JSON-RPC error, HTTP 5xx)
                self.status = "ok"
                return Answered(False, "")
        finally:
            _current.reset(reset)
        self.status = "ok"
        return Answered(not result.is_error, _result_text(result))

    async def close(self) -> None:
        await self._drop()

    async def _connected(self) -> Client:
        """The open session; one is opened (by a holder task) when there is none. A caller
        that gives up waiting leaves the holder to finish, and the next one waits for it."""
        async with self._lock:
            if self._holder is None or self._holder.done():
                self._ready = asyncio.get_running_loop().create_future()
                self._stop = asyncio.Event()
                self._holder = asyncio.create_task(self._hold(self._ready, self._stop))
            ready = self._ready
            assert ready is not None
            async with asyncio.timeout(self.settings.timeout_s):
                return await asyncio.shield(ready)

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Own the session for its whole life: the SDK's task groups are entered and left
        in this one task."""
        timeout = httpx2.Timeout(self.settings.timeout_s)
        http = httpx2.AsyncClient(
            headers=dict(self.settings.headers),
            timeout=timeout,
            transport=_CallTransport(httpx2.AsyncHTTPTransport()),
        )
        try:
            async with (
                http,
                Client(
                    streamable_http_client(self.url, http_client=http),
                    read_timeout_seconds=self.settings.timeout_s,
                ) as client,
            ):
                if not ready.done():
                    ready.set_result(client)
                await stop.wait()
        except BaseException as error:  # the session broke: the next call opens another
            if not ready.done():
                ready.set_exception(NotSent())
                ready.exception()  # retrieved: a caller that gave up is not an error
            if isinstance(error, asyncio.CancelledError):
                raise

    async def _drop(self) -> None:
        holder, stop = self._holder, self._stop
        self._holder = None
        if stop is not None:
            stop.set()
        if holder is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(holder, 2.0)

    def _tool(self, tool: mcp_types.Tool) -> RemoteTool:
        chosen = settings_for(self.settings, tool.name)
        hints = tool.annotations
        read_only = bool(hints and hints.read_only_hint)
        idempotent = chosen.idempotent
        if idempotent is None:
            idempotent = bool(hints and hints.idempotent_hint)
        return RemoteTool(
            source=self.settings.name,
            name=tool.name,
            description=tool.description or tool.title or tool.name,
            schema=without_argument(tool.input_schema, self.settings.customer_argument),
            kind=chosen.kind or ("read" if read_only else "write"),
            idempotent=idempotent,
            confirm=chosen.confirm,
            label=chosen.label or tool.title or (hints.title if hints else None),
            customer_argument=self.settings.customer_argument,
        )


MAX_PAGES = 50  # of a tool listing: a server whose cursor never ends cannot hang a start


async def _all_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _result_text(result: mcp_types.CallToolResult) -> str:
    if result.structured_content is not None:
        return capped(as_text(result.structured_content))
    parts = [c.text for c in result.content if isinstance(c, mcp_types.TextContent)]
    return capped("\n".join(parts))
