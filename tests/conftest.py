from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.db.migrate import migrate
from app.db.pool import open_pool
from tests.pg import create_fresh_database, drop_database

# The scripted model server fixtures (`model_server`, `scripted_model_session`) for every test.
pytest_plugins = ["tests.fakes.fixtures"]

DOMAIN_TABLES = (
    "customers, payment_methods, products, variants, orders, order_items, fulfillments, "
    "payment_transactions, tool_executions, audit_log, handoff_tickets, threads, runs, "
    "run_event_chunks, thread_leases, "
    "help_articles, transcript_archive, rate_limits, token_usage, "
    "thread_events, control_history, "
    "identity_codes, outbox, webhook_outbox, conversation_outcomes, held_claims, "
    # the checkpointer's: tests reuse thread ids ("<customer>:s1"), and a thread's history
    # left by an earlier test would be this one's too (a retention test found a third
    # checkpoint it never wrote)
    "checkpoints, checkpoint_blobs, checkpoint_writes"
)


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A fresh, migrated database for this test run, dropped afterwards."""
    import asyncio

    url, admin = create_fresh_database()
    asyncio.run(migrate(url))
    yield url
    drop_database(admin, url)


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    # Scripted model steps read tool results as JSON; the text rendering the model gets by
    # default has its own tests (test_model_view.py).
    return Settings(  # type: ignore[call-arg]
        database_url=database_url, observation_format="json", _env_file=None
    )


@pytest.fixture(scope="session")
async def pool(database_url: str, settings: Settings) -> AsyncIterator[AsyncConnectionPool[Any]]:
    p = await open_pool(database_url, settings, name="test")
    yield p
    await p.close()


@pytest.fixture
async def db(pool: AsyncConnectionPool[Any]) -> AsyncConnectionPool[Any]:
    """The pool, with every domain table emptied first so tests do not see each other."""
    async with pool.connection() as conn:
        await conn.execute(f"TRUNCATE {DOMAIN_TABLES} RESTART IDENTITY CASCADE")
    return pool
