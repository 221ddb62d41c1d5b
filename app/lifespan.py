"""Everything with a lifetime is created here: pools, checkpointer, store, model, graph."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import structlog
from fastapi import FastAPI
from langchain_core.language_models import BaseChatModel
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg_pool import AsyncConnectionPool

from app.actions.catalog import ActionsLedger
from app.actions.start import open_actions
from app.agent.graph import build_graph
from app.agent.llm import build_chat_model, model_http_client
from app.agent.ports import WriteLedger
from app.analytics.sweep import outcome_keeper
from app.analytics.sweeper import OutcomeSweeper
from app.api.deps import Services
from app.api.lg.webhooks import run_webhook_renderer
from app.background import Background, Loop
from app.channels.service import open_channels
from app.config import Settings
from app.db.checkpointer import PostgresCheckpointer
from app.db.embedded import database_url
from app.db.listen import Listener
from app.db.pool import open_pool
from app.demo.model import DEMO_MODEL_NAME, demo_chat_model
from app.eval.policy_gate import PolicyTester
from app.gc_tuning import tune_for_serving
from app.metrics import Metrics
from app.notify.codes import open_identity_codes
from app.notify.webhooks import WebhookWorker
from app.policies.texts import PolicyTexts
from app.runs.admission import ADMIT_TICK_S
from app.runs.leases import ThreadLeases
from app.runs.logs import RunLogFeed
from app.runs.repository import RunRepository
from app.runs.service import RunService
from app.threads.archive import PgTranscriptArchive
from app.threads.control import Controls
from app.threads.feed import ThreadFeed
from app.threads.inspect import ThreadInspector
from app.threads.retention import RetentionSweeper
from app.tools.registry import PostgresWriteLedger, build_tools

log = structlog.get_logger(__name__)
SHUTDOWN_GRACE_S = 20.0


def _chat_model(settings: Settings, stack: AsyncExitStack) -> tuple[BaseChatModel, str]:
    if settings.uses_demo_model:
        log.warning(
            "using the built-in DEMO model; connect a real one with OPENAI_API_KEY (OpenAI) "
            "or OPENAI_BASE_URL (any OpenAI-compatible server)"
        )
        return demo_chat_model(settings), DEMO_MODEL_NAME
    http_client = model_http_client(settings)
    stack.push_async_callback(http_client.aclose)
    log.info("using model", model=settings.llm_model, base_url=settings.openai_base_url or "openai")
    return build_chat_model(settings, http_client=http_client), settings.llm_model


@asynccontextmanager
async def build_services(
    settings: Settings, model: BaseChatModel | None = None
) -> AsyncIterator[Services]:
    """Open every resource the service needs; close them all on exit.

    `model` replaces the configured chat model (tests and benchmarks pass one).
    """
    async with AsyncExitStack() as stack:
        url = database_url(settings.database_url, settings.data_dir)
        pool = await open_pool(url, settings, name="app")
        stack.push_async_callback(pool.close)
        checkpointer = PostgresCheckpointer(pool)
        store = AsyncPostgresStore(pool)
        background = Background()  # every loop of the process, listed below
        stack.push_async_callback(background.close)
        leases = ThreadLeases(pool, ttl_s=settings.thread_lease_ttl_s)
        label = settings.llm_model
        if model is None:
            model, label = _chat_model(settings, stack)
        identity_codes = await stack.enter_async_context(open_identity_codes(settings, pool))
        tools = build_tools(pool, identity_codes, builtin=settings.builtin_tools)
        ledger: WriteLedger = PostgresWriteLedger(pool)
        actions = await open_actions(settings, pool, tools.names(), stack)  # None: no file
        if actions is not None:
            tools, ledger = actions.joined(tools), ActionsLedger(ledger, actions)
        archive = PgTranscriptArchive(pool)
        graph = build_graph(
            model=model,
            read_tools=tools.read,
            write_tools=tools.write,
            checkpointer=checkpointer,
            settings=settings,
            ledger=ledger,
            store=store,
            archive=archive,
        )
        repo = RunRepository(pool)
        metrics = Metrics()
        await stack.enter_async_context(metrics.sampling(pool))  # the pool gauges
        runs = RunService(
            graph,
            settings,
            leases,
            repo,
            metrics,
            ledger=ledger,
            write_names=frozenset(t.name for t in tools.write),
            policies=PolicyTexts(pool),
        )
        stack.push_async_callback(runs.wait_idle, SHUTDOWN_GRACE_S)
        feed = ThreadFeed(pool)
        logs = RunLogFeed(repo)
        inspector = ThreadInspector(graph, leases, repo, archive, outcome_keeper(settings))
        # every replica; rows claimed SKIP LOCKED; a run's body rendered as the /lg API's
        render = run_webhook_renderer(pool, inspector)
        webhooks = WebhookWorker(pool, settings, render=render)
        await webhooks.open()
        stack.push_async_callback(webhooks.close)
        add_loops(background, settings, pool, leases, runs, feed, logs, webhooks)
        listener = listener_for(settings, url, background)
        if listener is not None:
            listener.start()
            stack.push_async_callback(listener.stop)
        policy_tester = PolicyTester(pool, settings, url)
        stack.push_async_callback(policy_tester.close)
        controls = Controls(pool, graph, leases, settings, runs.cancel, metrics)
        # Chatwoot and email (docs/channels.md): off unless configured; every replica
        channels = await stack.enter_async_context(open_channels(settings, pool, runs, controls))
        yield Services(
            settings=settings,
            pool=pool,
            runs=runs,
            inspector=inspector,
            controls=controls,
            repo=repo,
            store=store,
            metrics=metrics,
            feed=feed,
            logs=logs,
            model_label=label,
            actions=actions,
            policy_tester=policy_tester,
            channels=channels,
        )


def add_loops(
    background: Background,
    settings: Settings,
    pool: AsyncConnectionPool[Any],
    leases: ThreadLeases,
    runs: RunService,
    feed: ThreadFeed,
    logs: RunLogFeed,
    webhooks: WebhookWorker,
) -> None:
    """The process's background work, all of it (app/background.py)."""
    background.add(leases.heartbeat)
    if runs.admission.on:  # the event loop's lag, and the turns admitted at once
        background.add(Loop("admission", runs.admission.tick, ADMIT_TICK_S, jitter=False))
    for loop in runs.requests.loops():  # cancels and log requests, log pruning, dead runs
        background.add(loop)
    background.add(feed.loop)
    background.add(logs.loop)
    for loop in webhooks.loops():
        background.add(loop)
    # one replica at a time (each sweep's advisory lock)
    retention = RetentionSweeper(pool, settings)
    if retention.active:
        background.add(Loop(retention.name, retention.sweep_once, retention.every_s))
    outcomes = OutcomeSweeper(pool, settings)
    if outcomes.active:
        background.add(Loop(outcomes.name, outcomes.sweep_once, outcomes.every_s))


def listener_for(settings: Settings, url: str, background: Background) -> Listener | None:
    """The LISTEN connection that wakes the loops: DATABASE_LISTEN_URL, else DATABASE_URL
    unless that goes through PgBouncer's transaction pool (prepared statements off), which
    keeps no LISTEN; `off`, or no direct connection: the loops poll at their own pace."""
    if settings.database_listen_url:
        target = settings.database_listen_url
    elif settings.db_prepare_threshold is None:
        return None
    else:
        target = url
    if target == "off":
        return None
    loops = background.loops
    return Listener(
        target,
        {
            "cs_run_requests": [loops["run requests"]],
            "cs_thread_events": [loops["thread feed"]],
            "cs_run_events": [loops["run logs"]],
            "cs_webhooks": [loops["webhook delivery"]],
        },
    )


def lifespan_for(settings: Settings, model: BaseChatModel | None = None) -> Any:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with build_services(settings, model) as services:
            app.state.services = services
            tune_for_serving(settings.gc_gen0_threshold)  # after startup: freezes its heap
            yield

    return lifespan
