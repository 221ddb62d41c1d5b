"""An outcome outlives its thread, and is computed before the thread goes, on each delete
path: DELETE /threads (and /lg's), the retention sweep expiring a thread, `data erase`.
The conversations are real ones through the service, none of them idle yet, so the outcome
sweep would not have reached them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from app.analytics.sweep import outcome_keeper
from app.db.erase import erase_user
from app.threads.retention import RetentionSweeper
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.integration import test_analytics as day
from tests.integration.api_harness import LiveServer
from tests.integration.test_analytics import NOAH, PENDING_ORDER, codes, outcomes, say

server = day.server
client = day.client


async def declined_conversation(
    client: httpx.AsyncClient, server: LiveServer, model: ScriptedModelServer, session: str
) -> None:
    model.use(
        Script(
            [
                Reply.call(
                    "cancel_pending_order", order_id=PENDING_ORDER, reason="ordered by mistake"
                ),
                Reply.say("All right, I left the order as it is."),
            ]
        )
    )
    await say(client, server, session, "cancel my order")
    await say(client, server, session, "", resume="reject")


async def count(pool: AsyncConnectionPool[Any], sql: str) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute(sql)).fetchone()
    assert row is not None
    return int(row["n"])


class TestDeletedThreadsKeepTheirOutcome:
    async def test_delete_threads_computes_the_outcome_before_the_runs_go(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        await declined_conversation(client, server, scripted_model_session, "gone")
        deleted = await client.delete("/threads/gone", headers=server.headers(NOAH))
        row = (await outcomes(db))["gone"]

        assert deleted.status_code == 204
        assert await count(db, "SELECT count(*) AS n FROM runs") == 0
        assert row["result"] == "resolved" and codes(row) == {"declined_write"}
        assert row["turns"] == 1 and row["confirmations_declined"] == 1
        assert row["tokens_in"] > 0 and row["user_id"] == NOAH

    async def test_the_langgraph_api_delete_keeps_it_too(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        scripted_model_session.use(Script([Reply.say("Hello Noah.")]))
        await say(client, server, "lg-gone", "hello")
        thread_id = f"{NOAH}:lg-gone"
        # The /lg API names a customer's thread by its session id.
        deleted = await client.delete("/lg/threads/lg-gone", headers=server.headers(NOAH))
        rows = await outcomes(db)

        assert deleted.status_code in (200, 204), deleted.text
        assert await count(db, "SELECT count(*) AS n FROM threads") == 0
        assert rows["lg-gone"]["thread_id"] == thread_id and rows["lg-gone"]["turns"] == 1

    async def test_retention_expiring_a_thread_keeps_its_outcome_in_the_same_transaction(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        await declined_conversation(client, server, scripted_model_session, "old")
        async with db.connection() as conn:  # a thread idle past THREAD_TTL_DAYS (90)
            await conn.execute("UPDATE threads SET updated_at = now() - interval '100 days'")
            await conn.execute(
                """UPDATE runs SET created_at = created_at - interval '100 days',
                       finished_at = finished_at - interval '100 days'"""
            )
        await RetentionSweeper(db, server.settings).sweep_once()
        row = (await outcomes(db))["old"]

        assert await count(db, "SELECT count(*) AS n FROM threads") == 0
        assert await count(db, "SELECT count(*) AS n FROM runs") == 0
        assert codes(row) == {"declined_write"} and row["turns"] == 1

    async def test_erase_keeps_unswept_outcomes_without_the_customers_id(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        await declined_conversation(client, server, scripted_model_session, "erased")
        erased = await erase_user(db, NOAH, keep=outcome_keeper(server.settings))
        async with db.connection() as conn:
            cur = await conn.execute("SELECT * FROM conversation_outcomes")
            rows = await cur.fetchall()

        assert erased.threads == 1 and erased.outcomes_anonymised == 1
        (row,) = rows
        assert row["user_id"] is None and NOAH not in row["thread_id"]
        assert {f["code"] for f in row["flags"]} == {"declined_write"}

    async def test_the_erase_command_keeps_them_as_well(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
        database_url: str,
    ) -> None:
        await declined_conversation(client, server, scripted_model_session, "erased-cli")
        env = {**os.environ, "DATABASE_URL": database_url}
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "app", "data", "erase", NOAH],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

        assert done.returncode == 0, done.stderr
        assert "1 outcomes anonymised" in done.stdout
        assert await count(db, "SELECT count(*) AS n FROM conversation_outcomes") == 1
