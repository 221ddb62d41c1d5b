"""Prometheus metrics, served at GET /metrics.

One process: prometheus-client's default registry. Several (`serve --workers N`): `serve`
points PROMETHEUS_MULTIPROC_DIR at an empty folder before the workers start, every worker
writes its values to its own files there (an mmap write per observation), and a scrape,
whichever worker answers it, adds them all up (`MultiProcessCollector`). So the totals are
the service's, not one worker's.

Nothing is created at import time: the instruments come into being on first use in each
process (`instruments()`), after `serve` has set the environment up.

Labels are bounded: statuses, directions, decisions, the configured model's name and the
registered tools' names; never a user, thread or run id.

A turn makes about fifteen observations (benchmarks/metrics_cost.py measures them), none
per token.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import prometheus_client
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from app import tracing

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST
# In multi-process mode every worker samples its pool this often (the scraping worker also
# at the scrape), so the summed gauges are at most this old.
POOL_SAMPLE_EVERY_S = 5.0

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Instruments:
    runs: Counter
    run_seconds: Histogram
    first_token_seconds: Histogram
    model_call_seconds: Histogram
    tool_seconds: Histogram
    lock_wait_seconds: Histogram
    model_tokens: Counter
    tool_cache: Counter
    tool_results: Counter
    thread_busy: Counter
    rate_limited: Counter
    overloaded: Counter
    breaker_trips: Counter
    confirmations: Counter
    active_runs: Gauge
    open_streams: Gauge
    pool_in_use: Gauge
    pool_waiting: Gauge
    handoffs: Counter
    queue_length: Gauge
    time_to_accept: Histogram
    time_held: Histogram


def _live_gauge(name: str, text: str) -> Gauge:
    # livesum: the workers' values added up, a dead worker's left out (`_forget_dead`).
    return Gauge(name, text, multiprocess_mode="livesum")


@functools.cache
def instruments() -> Instruments:
    """This process's instruments, registered in the default registry on first use."""
    # No `_created` series beside each counter and histogram.
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    return Instruments(
        runs=Counter("cs_agent_runs_total", "Runs finished, by status.", ["status"]),
        run_seconds=Histogram(
            "cs_agent_run_duration_seconds",
            "Wall time of a run, from its start to its end.",
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300),
        ),
        first_token_seconds=Histogram(
            "cs_agent_time_to_first_token_seconds",
            "From a run's start to the first token of its answer (runs that streamed text).",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30),
        ),
        model_call_seconds=Histogram(
            "cs_agent_model_call_duration_seconds",
            "One model call, from the request to the end of its stream.",
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 120),
        ),
        tool_seconds=Histogram(
            "cs_agent_tool_duration_seconds",
            "One tool call that ran (not refused, not served from the cache), by tool.",
            ["tool"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        ),
        lock_wait_seconds=Histogram(
            "cs_agent_lock_wait_seconds",
            "Claiming a thread's lease for a run (cs_claim_thread), granted or refused.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
        ),
        model_tokens=Counter(
            "cs_agent_model_tokens_total",
            "Model tokens, by direction and model.",
            ["direction", "model"],
        ),
        tool_cache=Counter(
            "cs_agent_tool_cache_total", "Read-tool cache lookups, by result.", ["result"]
        ),
        tool_results=Counter("cs_agent_tool_results_total", "Tool results, by status.", ["status"]),
        thread_busy=Counter(
            "cs_agent_thread_busy_total", "Requests refused because the thread had a run."
        ),
        overloaded=Counter(
            "cs_agent_overloaded_total",
            "Posts and resumes refused because the worker was serving all it could (503).",
        ),
        rate_limited=Counter(
            "cs_agent_rate_limited_total",
            "Requests refused by a rate limit or budget, by limit.",
            ["limit"],
        ),
        breaker_trips=Counter(
            "cs_agent_breaker_trips_total",
            "A tool's circuit breaker opened after consecutive failures, by tool.",
            ["tool"],
        ),
        confirmations=Counter(
            "cs_agent_confirmations_total",
            "The customer's decisions on writes waiting for confirmation, by decision.",
            ["decision"],
        ),
        active_runs=_live_gauge("cs_agent_active_runs", "Runs executing now."),
        open_streams=_live_gauge("cs_agent_open_streams", "SSE responses open now."),
        pool_in_use=_live_gauge(
            "cs_agent_db_pool_connections_in_use", "Pooled connections checked out now."
        ),
        pool_waiting=_live_gauge(
            "cs_agent_db_pool_requests_waiting", "Requests waiting for a pooled connection now."
        ),
        handoffs=Counter(
            "cs_agent_handoffs_total",
            "Threads handed to people: by the agent's handoff, or taken over by staff; by reason.",
            ["reason"],
        ),
        # read from the database at each scrape: every worker sees the same queue
        queue_length=Gauge(
            "cs_agent_handoff_queue_length",
            "Threads handed off and waiting for a person, now.",
            multiprocess_mode="max",
        ),
        time_to_accept=Histogram(
            "cs_agent_handoff_time_to_accept_seconds",
            "From a handoff to the person who accepted it.",
            buckets=(5, 15, 30, 60, 120, 300, 600, 1800, 3600, 14400),
        ),
        time_held=Histogram(
            "cs_agent_handoff_time_held_seconds",
            "How long a person held a thread before handing it back.",
            buckets=(30, 60, 120, 300, 600, 1800, 3600, 14400, 86400),
        ),
    )


@functools.cache
def _child(metric: Any, *labels: str) -> Any:
    """A labelled child, looked up once: `labels()` takes a lock and costs a microsecond."""
    return metric.labels(*labels)


# The counters other modules count by name (`Metrics.add`).
_BY_NAME: dict[str, Callable[[Instruments], Counter]] = {
    "cs_agent_thread_busy_total": lambda i: i.thread_busy,
    "cs_agent_rate_limited_total": lambda i: i.rate_limited,
    "cs_agent_overloaded_total": lambda i: i.overloaded,
}


class Metrics:
    """The service's metrics, handed out by the lifespan. Every instance shares the process's
    instruments (the registry is per process), so tests may build many apps."""

    def __init__(self) -> None:
        self.i = instruments()

    def add(self, name: str, value: float = 1, **labels: str) -> None:
        counter = _BY_NAME[name](self.i)
        (counter.labels(**labels) if labels else counter).inc(value)

    def run_started(self) -> None:
        self.i.active_runs.inc()

    def run_ended(
        self,
        status: str,
        seconds: float,
        *,
        first_token_s: float | None,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cache_hits: int,
        cache_misses: int,
        tool_oks: int,
        tool_errors: int,
    ) -> None:
        i = self.i
        i.active_runs.dec()
        _child(i.runs, status).inc()
        i.run_seconds.observe(seconds)
        if first_token_s is not None:
            i.first_token_seconds.observe(first_token_s)
        # Zeros are not written: each observation is an mmap write in multi-process mode.
        for counter, label, value in (
            (i.tool_cache, "hit", cache_hits),
            (i.tool_cache, "miss", cache_misses),
            (i.tool_results, "ok", tool_oks),
            (i.tool_results, "error", tool_errors),
        ):
            if value:
                _child(counter, label).inc(value)
        if input_tokens:
            _child(i.model_tokens, "input", model).inc(input_tokens)
        if output_tokens:
            _child(i.model_tokens, "output", model).inc(output_tokens)

    def confirmation(self, decision: str) -> None:
        _child(self.i.confirmations, "approve" if decision == "approve" else "reject").inc()

    def handed_off(self, reason: str) -> None:
        _child(self.i.handoffs, reason).inc()

    def control_changed(self, action: str, waited_s: float | None) -> None:
        """A change of control by a person; `waited_s`: how long the state it left lasted."""
        if action == "take_over":
            _child(self.i.handoffs, "taken over").inc()
        if waited_s is None:
            return
        if action == "accept":
            self.i.time_to_accept.observe(waited_s)
        elif action == "release":
            self.i.time_held.observe(waited_s)

    async def sample_queue(self, pool: Any) -> None:
        """The handoff queue's length (one indexed count), sampled at each scrape."""
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM thread_leases WHERE control = 'queued'"
            )
            row = await cur.fetchone()
        self.i.queue_length.set(row["n"] if row else 0)

    def sample_pool(self, pool: Any) -> None:
        """The pool's connections in use and requests waiting (psycopg_pool `get_stats`)."""
        stats = pool.get_stats()
        self.i.pool_in_use.set(stats.get("pool_size", 0) - stats.get("pool_available", 0))
        self.i.pool_waiting.set(stats.get("requests_waiting", 0))

    @contextlib.asynccontextmanager
    async def sampling(self, pool: Any) -> AsyncIterator[None]:
        """While the service runs: with several workers, sample the pool every few seconds
        (a scrape reaches one worker only); at exit, take this worker's gauges out."""
        import asyncio

        async def sample_forever() -> None:
            while True:
                self.sample_pool(pool)
                await asyncio.sleep(POOL_SAMPLE_EVERY_S)

        task = asyncio.create_task(sample_forever()) if multiprocess_dir() else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]

    def render(self, pool: Any | None = None) -> bytes:
        """The exposition text: this process's registry, or every worker's files added up."""
        if pool is not None:
            self.sample_pool(pool)
        path = multiprocess_dir()
        if path is None:
            return generate_latest(REGISTRY)
        _forget_dead(path)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
        return generate_latest(registry)


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


_LIVE_FILE = re.compile(r"gauge_live\w+?_(\d+)\.db$")


def _forget_dead(path: str) -> None:
    """Drop the live gauges of workers that died without saying so (killed): otherwise a
    dead worker's runs and streams would count as open for ever."""
    pids = {
        int(m.group(1)) for f in glob.glob(f"{path}/gauge_live*.db") if (m := _LIVE_FILE.search(f))
    }
    for pid in pids:
        if not _alive(pid):
            multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def multiprocess_mode() -> Iterator[Path]:
    """For `serve --workers N`: PROMETHEUS_MULTIPROC_DIR set (a fresh temp folder unless the
    operator named one) and emptied before the workers start; a folder made here is removed
    at exit."""
    given = multiprocess_dir()
    path = Path(given) if given else Path(tempfile.mkdtemp(prefix="cs-agent-metrics-"))
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):  # the last run's values, or another service's
        stale.unlink()
    os.environ[MULTIPROC_ENV] = str(path)
    try:
        yield path
    finally:
        if not given:
            shutil.rmtree(path, ignore_errors=True)


# -- observation points for the hot paths, each a few observations, none per token ---------


def timed(
    histogram: Callable[[Instruments], Histogram],
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Observe how long each call of an async function took, returned or raised."""

    def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                histogram(instruments()).observe(time.perf_counter() - started)

        return wrapper

    return decorate


def lock_wait(i: Instruments) -> Histogram:
    return i.lock_wait_seconds


@contextlib.contextmanager
def tool_call(name: str, call_id: str | None, arguments: Any = None) -> Iterator[tracing.Span]:
    """One tool call that runs: its duration by tool, and its span when tracing is on.
    `name` is a registered tool's (the caller checked), so the label stays bounded."""
    started = time.perf_counter()
    try:
        with tracing.tool_span(name, call_id, arguments) as span:
            yield span
    finally:
        seconds = time.perf_counter() - started
        _child(instruments().tool_seconds, _bounded_tool(name)).observe(seconds)


def breaker_tripped(tool: str) -> None:
    instruments().breaker_trips.labels(_bounded_tool(tool)).inc()


_tool_labels: set[str] = set()
MAX_TOOL_LABELS = 64  # the registry has about twenty tools


def _bounded_tool(name: str) -> str:
    """A tool name a model wrote may be anything; only so many ever become labels."""
    if name in _tool_labels:
        return name
    if len(_tool_labels) >= MAX_TOOL_LABELS or not name.isidentifier() or len(name) > 64:
        return "other"
    _tool_labels.add(name)
    return name


@contextlib.contextmanager
def open_stream() -> Iterator[None]:
    """An SSE response, while it is open."""
    gauge = instruments().open_streams
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()


def observed_model_call(
    fn: Callable[P, Awaitable[R]],
) -> Callable[P, Awaitable[R]]:
    """A model call: its duration, and its span (with usage and time to first token) when
    tracing is on. The call marks its first chunk with `first_chunk()`."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        started = time.perf_counter()
        try:
            with tracing.model_span(args, started) as span:
                result = await fn(*args, **kwargs)
                tracing.model_reply(span, result)
                return result
        finally:
            instruments().model_call_seconds.observe(time.perf_counter() - started)

    return wrapper


first_chunk = tracing.first_chunk
tool_result = tracing.tool_result
