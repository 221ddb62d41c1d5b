"""Traces: one per run, from the HTTP request down to each model call, tool call, checkpoint
store and write transaction, with GenAI attributes; contents only when allowed; log lines
with the trace id; nothing at all while tracing is off. Spans go to the SDK's in-memory
exporter (skipped without the otel extra)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind
from psycopg_pool import AsyncConnectionPool

from app import tracing
from app.config import Settings
from app.main import create_app
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server

NOAH = "noah_brown_6181"
PENDING_ORDER = "#W2611340"


@pytest.fixture(scope="module")
def traced() -> Iterator[None]:
    """Tracing on for the module's tests, off after them."""
    tracing.enable(SimpleSpanProcessor(InMemorySpanExporter()))
    yield
    tracing.disable()


@pytest.fixture
def exporter(traced: None) -> InMemorySpanExporter:
    """A fresh exporter per test (turning tracing on again shuts the last one down)."""
    memory = InMemorySpanExporter()
    tracing.enable(SimpleSpanProcessor(memory), model="scripted")
    return memory


@pytest.fixture(scope="module")
def server(
    traced: None, database_url: str, scripted_model_session: ScriptedModelServer
) -> Iterator[LiveServer]:
    settings = Settings(database_url=database_url, app_env="dev", _env_file=None)  # type: ignore[call-arg]
    with live_server(settings, scripted_model_session) as live:  # built while tracing is on
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    async with server.client() as c:
        yield c


async def run_trace(exporter: InMemorySpanExporter, run_id: str) -> list[ReadableSpan]:
    """The finished spans of the trace of run `run_id`, once its run span has ended."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        spans = list(exporter.get_finished_spans())
        run = [s for s in spans if (s.attributes or {}).get("cs_agent.run_id") == run_id]
        root = next((s for s in run if s.name.startswith("invoke_agent")), None)
        if root is not None and root.context is not None:
            trace_id = root.context.trace_id
            return [s for s in spans if s.context is not None and s.context.trace_id == trace_id]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no run span for {run_id}: {[s.name for s in spans]}")


def named(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def is_below(span: ReadableSpan, ancestor: ReadableSpan, spans: list[ReadableSpan]) -> bool:
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    current: ReadableSpan | None = span
    while current is not None and current.parent is not None:
        if ancestor.context is not None and current.parent.span_id == ancestor.context.span_id:
            return True
        current = by_id.get(current.parent.span_id)
    return False


async def post(client: httpx.AsyncClient, server: LiveServer, path: str, body: Any) -> Any:
    r = await client.post(path, json=body, headers=server.headers(NOAH))
    assert r.status_code == 200, r.text
    return r.json()


class TestOneTracePerRun:
    async def test_a_turn_traces_its_request_run_model_calls_tool_and_checkpoints(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        exporter: InMemorySpanExporter,
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    Reply.say("It is pending."),
                ]
            )
        )
        body = await post(client, server, "/threads/t1/messages", {"content": "status?"})
        spans = await run_trace(exporter, body["run_id"])

        (request,) = named(spans, "POST")
        assert request.name == "POST /threads/{session_id}/messages"
        assert request.kind == SpanKind.SERVER and request.parent is None
        assert attrs(request)["http.response.status_code"] == 200
        (run,) = named(spans, "invoke_agent")
        assert is_below(run, request, spans)
        assert attrs(run)["gen_ai.conversation.id"] == f"{NOAH}:t1"
        assert attrs(run)["cs_agent.run.status"] == "completed"

        calls = named(spans, "chat ")
        assert len(calls) == 2
        for call in calls:
            a = attrs(call)
            assert a["gen_ai.operation.name"] == "chat"
            assert a["gen_ai.request.model"] == "gpt-4o-mini"
            assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
            assert a["gen_ai.server.time_to_first_token"] > 0
            assert a["cs_agent.run_id"] == body["run_id"]
            assert "gen_ai.input.messages" not in a and "gen_ai.output.messages" not in a
            assert is_below(call, run, spans)
        (tool,) = named(spans, "execute_tool")
        assert attrs(tool)["gen_ai.tool.name"] == "get_order_details"
        assert attrs(tool)["gen_ai.conversation.id"] == f"{NOAH}:t1"
        assert "gen_ai.tool.call.arguments" not in attrs(tool)
        stores = named(spans, "checkpoint store")
        assert stores and all(is_below(s, run, spans) for s in stores)

    async def test_a_confirmed_write_is_a_trace_of_its_own_with_the_transaction(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        exporter: InMemorySpanExporter,
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call(
                        "cancel_pending_order", order_id=PENDING_ORDER, reason="ordered by mistake"
                    ),
                    Reply.say("Done."),
                ]
            )
        )
        asked = await post(client, server, "/threads/t2/messages", {"content": "cancel it"})
        first = await run_trace(exporter, asked["run_id"])
        done = await post(client, server, "/threads/t2/resume", {"decision": "approve"})
        second = await run_trace(exporter, done["run_id"])

        assert not named(first, "write transaction")
        (write,) = named(second, "write transaction")
        assert attrs(write)["gen_ai.tool.name"] == "cancel_pending_order"
        (tool,) = named(second, "execute_tool")
        assert is_below(write, tool, second)
        assert named(second, "POST")[0].name == "POST /threads/{session_id}/resume"
        assert {s.context.trace_id for s in first if s.context} != {
            s.context.trace_id for s in second if s.context
        }

    async def test_contents_go_on_the_spans_only_when_allowed(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        exporter: InMemorySpanExporter,
    ) -> None:
        memory = InMemorySpanExporter()
        tracing.enable(SimpleSpanProcessor(memory), capture_content=True)
        model_server.use(
            Script(
                [
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    Reply.say("It is pending."),
                ]
            )
        )
        body = await post(client, server, "/threads/t3/messages", {"content": "where is it?"})
        spans = await run_trace(memory, body["run_id"])
        first_call = min(named(spans, "chat "), key=lambda s: s.start_time or 0)
        assert "where is it?" in attrs(first_call)["gen_ai.input.messages"]
        (tool,) = named(spans, "execute_tool")
        assert PENDING_ORDER in attrs(tool)["gen_ai.tool.call.arguments"]
        assert "pending" in attrs(tool)["gen_ai.tool.call.result"]


class TestLogLines:
    def test_a_log_line_carries_the_trace_and_span_ids_inside_a_span(
        self, exporter: InMemorySpanExporter
    ) -> None:
        with tracing.span("work") as current:
            event = tracing.add_trace_ids(None, "info", {"event": "hello"})
        context = current.get_span_context()  # type: ignore[attr-defined]
        assert event["trace_id"] == format(context.trace_id, "032x")
        assert event["span_id"] == format(context.span_id, "016x")
        assert "trace_id" not in tracing.add_trace_ids(None, "info", {"event": "outside"})

    def test_the_processor_is_configured_only_when_tracing_is_asked_for(self) -> None:
        off = Settings(_env_file=None)  # type: ignore[call-arg]
        on = Settings(otel_exporter_otlp_endpoint="http://collector:4318", _env_file=None)  # type: ignore[call-arg]
        assert tracing.log_processors(off) == []
        assert tracing.log_processors(on) == [tracing.add_trace_ids]


class TestTracingOff:
    async def test_off_every_hook_is_a_shared_no_op_and_no_middleware_is_installed(
        self, traced: None, database_url: str
    ) -> None:
        tracing.disable()
        try:
            assert tracing.span("x") is tracing.span("y")
            with tracing.span("x") as current:
                assert current is tracing.NO_SPAN
            assert tracing.model_span([None], 0.0) is tracing.span("z")
            coroutine = asyncio.sleep(0)
            assert tracing.in_run(coroutine, "run", "thread") is coroutine
            await coroutine
            assert tracing.add_trace_ids(None, "info", {}) == {}
            settings = Settings(database_url=database_url, _env_file=None)  # type: ignore[call-arg]
            app = create_app(settings)
            assert tracing.RequestSpans not in {m.cls for m in app.user_middleware}
        finally:
            tracing.enable(SimpleSpanProcessor(InMemorySpanExporter()))
