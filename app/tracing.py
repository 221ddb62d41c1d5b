"""OpenTelemetry traces: optional (`pip install cs-agent[otel]`), exported over OTLP/HTTP
when OTEL_EXPORTER_OTLP_ENDPOINT is set.

One trace per run: the HTTP request (`RequestSpans`), the run (`invoke_agent`), each model
call (`chat {model}`), each tool call (`execute_tool {tool}`), each store of the run's
checkpoints and each write's transaction. Attributes follow OpenTelemetry's GenAI semantic
conventions (gen_ai.*), with the thread as `gen_ai.conversation.id` and the run as
`cs_agent.run_id`; message contents and tool arguments only with OTEL_CAPTURE_CONTENT=true.

Off, every hook here is one function call that returns a shared no-op (or the coroutine it
was given): no tracer is called and nothing is allocated on the hot path.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

import structlog

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Tracer
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from app.config import Settings

log = structlog.get_logger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
AGENT_NAME = "cs-agent"
# Probes and scrapes would be most of the traces, and tell nothing.
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class Span(Protocol):
    """What a hook hands back: an OpenTelemetry span, or the no-op while tracing is off."""

    def is_recording(self) -> bool: ...

    def set_attribute(self, key: str, value: Any) -> None: ...


class _NoSpan:
    def is_recording(self) -> bool:
        return False

    def set_attribute(self, key: str, value: Any) -> None:
        return None


NO_SPAN = _NoSpan()
_NOTHING: contextlib.nullcontext[Span] = contextlib.nullcontext(NO_SPAN)  # reusable


class _State:
    tracer: Tracer | None = None
    provider: TracerProvider | None = None
    capture_content = False
    model = ""  # gen_ai.request.model when the chat model does not say


_on = _State()
# The run the current task works for, set by `in_run` for the spans below it.
_run_ids: ContextVar[tuple[str, str] | None] = ContextVar("cs_agent_run_ids", default=None)
# When the current model call started (perf_counter), for its time to first token.
_call_started: ContextVar[float] = ContextVar("cs_agent_model_call_started", default=0.0)


def enabled() -> bool:
    return _on.tracer is not None


def requested(settings: Settings) -> bool:
    return bool(settings.otel_exporter_otlp_endpoint)


def configure(settings: Settings) -> bool:
    """Turn tracing on in this process when the settings ask for it and the `otel` extra is
    installed. Each worker process calls it (from `create_app`): exporters do not survive a
    fork. Idempotent; never turns tracing off."""
    if enabled() or not requested(settings):
        return enabled()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not installed")
        return False
    endpoint = str(settings.otel_exporter_otlp_endpoint).rstrip("/") + "/v1/traces"
    enable(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)),
        capture_content=settings.otel_capture_content,
        model="demo" if settings.uses_demo_model else settings.llm_model,
        service_name=settings.otel_service_name,
    )
    log.info("tracing on", endpoint=endpoint, capture_content=settings.otel_capture_content)
    return True


def enable(
    processor: SpanProcessor,
    *,
    capture_content: bool = False,
    model: str = "",
    service_name: str = AGENT_NAME,
) -> None:
    """Trace through `processor` (tests pass an in-memory exporter's)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    disable()
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(processor)
    _on.provider, _on.tracer = provider, provider.get_tracer("cs_agent")
    _on.capture_content, _on.model = capture_content, model
    _add_log_processor()


def disable() -> None:
    """Back to zero cost; spans still queued are flushed first."""
    provider, _on.provider, _on.tracer = _on.provider, None, None
    if provider is not None:
        provider.shutdown()


# -- spans ---------------------------------------------------------------------------------


def span(
    name: str, attributes: Mapping[str, Any] | None = None
) -> contextlib.AbstractContextManager[Span]:
    """A span below the current one, carrying the run's ids; the no-op while off."""
    tracer = _on.tracer
    if tracer is None:
        return _NOTHING
    return tracer.start_as_current_span(name, attributes=_with_run(attributes))


def traced(
    name: str, attributes: Callable[..., Mapping[str, Any]] | None = None
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Run each call of an async function in a span; `attributes` gets the call's arguments
    and is called only while tracing is on."""

    def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if _on.tracer is None:
                return await fn(*args, **kwargs)
            with span(name, attributes(*args, **kwargs) if attributes else None):
                return await fn(*args, **kwargs)

        return wrapper

    return decorate


def in_run(
    coroutine: Coroutine[Any, Any, R], run_id: str, thread_id: str
) -> Coroutine[Any, Any, R]:
    """The run's coroutine inside its `invoke_agent` span (the coroutine itself while off)."""
    if _on.tracer is None:
        return coroutine
    return _run_in_span(coroutine, run_id, thread_id)


async def _run_in_span(coroutine: Coroutine[Any, Any, R], run_id: str, thread_id: str) -> R:
    _run_ids.set((run_id, thread_id))  # this task's own context
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT_NAME}
    with span(f"invoke_agent {AGENT_NAME}", attributes):
        return await coroutine


def run_outcome(status: str, input_tokens: int, output_tokens: int) -> None:
    """The run's status and token totals, on its span."""
    if _on.tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    current.set_attribute("cs_agent.run.status", status)
    current.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    current.set_attribute("gen_ai.usage.output_tokens", output_tokens)


def _with_run(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    out = {k: v for k, v in (attributes or {}).items() if v is not None}
    ids = _run_ids.get()
    if ids is not None:
        out["cs_agent.run_id"], out["gen_ai.conversation.id"] = ids
    return out


# -- model calls and tool calls (GenAI semantic conventions) --------------------------------


def model_span(args: Sequence[Any], started: float) -> contextlib.AbstractContextManager[Span]:
    """The span of one model call; `args` are the call's (runnable, window)."""
    if _on.tracer is None:
        return _NOTHING
    _call_started.set(started)
    model = _model_name(args[0] if args else None)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": model,
    }
    if _on.capture_content and len(args) > 1:
        attributes["gen_ai.input.messages"] = _messages_json(args[1])
    return span(f"chat {model}", attributes)


def first_chunk() -> None:
    """The model's first chunk arrived: the call's time to first token, on its span."""
    if _on.tracer is None:
        return
    from opentelemetry import trace

    ttft = time.perf_counter() - _call_started.get()
    trace.get_current_span().set_attribute("gen_ai.server.time_to_first_token", ttft)


def model_reply(current: Span, message: Any) -> None:
    if not current.is_recording():
        return
    usage = getattr(message, "usage_metadata", None) or {}
    meta = getattr(message, "response_metadata", None) or {}
    current.set_attribute("gen_ai.usage.input_tokens", int(usage.get("input_tokens", 0)))
    current.set_attribute("gen_ai.usage.output_tokens", int(usage.get("output_tokens", 0)))
    if meta.get("model_name"):
        current.set_attribute("gen_ai.response.model", str(meta["model_name"]))
    if meta.get("finish_reason"):
        current.set_attribute("gen_ai.response.finish_reasons", [str(meta["finish_reason"])])
    if _on.capture_content:
        current.set_attribute("gen_ai.output.messages", _messages_json([message]))


def tool_span(
    name: str, call_id: str | None, arguments: Any = None
) -> contextlib.AbstractContextManager[Span]:
    if _on.tracer is None:
        return _NOTHING
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function",
    }
    if _on.capture_content and arguments is not None:
        attributes["gen_ai.tool.call.arguments"] = _json(arguments)
    return span(f"execute_tool {name}", attributes)


def tool_result(current: Span, result: Any) -> None:
    if not current.is_recording():
        return
    status = getattr(result, "status", None)
    if status == "error":
        current.set_attribute("error.type", "tool_error")
    if _on.capture_content:
        current.set_attribute("gen_ai.tool.call.result", str(getattr(result, "content", result)))


def _model_name(runnable: Any) -> str:
    bound = getattr(runnable, "bound", runnable)
    name = getattr(bound, "model_name", None) or getattr(bound, "model", None)
    return name if isinstance(name, str) and name else _on.model or "unknown"


_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def _messages_json(messages: Any) -> str:
    out = []
    for m in messages or []:
        role = _ROLES.get(getattr(m, "type", ""), str(getattr(m, "type", "")))
        content = getattr(m, "content", "")
        text = content if isinstance(content, str) else _json(content)
        out.append({"role": role, "parts": [{"type": "text", "content": text}]})
    return _json(out)


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


# -- the HTTP request ----------------------------------------------------------------------


class RequestSpans:
    """A SERVER span per HTTP request (pure ASGI), continuing a caller's `traceparent`.
    `create_app` installs it only while tracing is on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tracer = _on.tracer
        if tracer is None or scope["type"] != "http" or scope["path"] in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        from opentelemetry import propagate
        from opentelemetry.trace import SpanKind, Status, StatusCode

        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        method = scope["method"]
        attributes = {
            "http.request.method": method,
            "url.path": scope["path"],
            "url.scheme": scope.get("scheme", "http"),
        }
        with tracer.start_as_current_span(
            method, context=propagate.extract(carrier), kind=SpanKind.SERVER, attributes=attributes
        ) as current:

            async def send_status(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    current.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        current.set_status(Status(StatusCode.ERROR))
                await send(message)

            try:
                await self.app(scope, receive, send_status)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if isinstance(route, str):
                    current.set_attribute("http.route", route)
                    current.update_name(f"{method} {route}")


# -- logs ----------------------------------------------------------------------------------


def add_trace_ids(_: Any, __: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """structlog processor: the current trace and span ids, while tracing is on."""
    if _on.tracer is None:
        return event
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event["trace_id"] = format(context.trace_id, "032x")
        event["span_id"] = format(context.span_id, "016x")
    return event


def log_processors(settings: Settings) -> list[structlog.typing.Processor]:
    """For `configure_logging`: the trace ids, only when tracing is asked for."""
    return [add_trace_ids] if requested(settings) else []


def _add_log_processor() -> None:
    # A worker process has structlog's default configuration (`configure_logging` runs in
    # `serve`'s own process): the ids go in front of whatever renders.
    processors = list(structlog.get_config()["processors"])
    if add_trace_ids not in processors:
        structlog.configure(processors=[add_trace_ids, *processors])
