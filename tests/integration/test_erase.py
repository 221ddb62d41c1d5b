"""Personal data at the end of a thread (DELETE /threads) and of a customer (data erase)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.db.erase import redact_arguments, redact_outcome
from app.memory.store import namespace
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import fetch_all, fetch_one, load_small_shop
from tests.integration.api_harness import LiveServer, live_server

NOAH, MIA = "noah_brown_6181", "mia_garcia_4516"
LOOKALIKE = "noahxbrown_6181"  # matches NOAH's ids if `_` were read as a LIKE wildcard
PENDING_ORDER = "#W2611340"
SECRET_ADDRESS = {
    "address1": "12 Hidden Lane",
    "address2": "Flat 9",
    "city": "Secretville",
    "state": "CA",
    "country": "USA",
    "zip": "90210",
}
SECRETS = ("Hidden Lane", "Flat 9", "Secretville", "90210", "Noah", "Brown", "lost my keys")
RECORDS = """SELECT 'execution' AS kind, tool_name, arguments, outcome, ok, created_at
                 FROM tool_executions WHERE thread_id = %s
             UNION ALL
             SELECT 'audit', tool_name, arguments, outcome, ok, created_at
                 FROM audit_log WHERE thread_id = %s
             ORDER BY kind, tool_name"""


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url, write_confirmation="off", _env_file=None
    )
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    async with server.client() as c:
        yield c


async def writes_with_personal_data(
    client: httpx.AsyncClient, server: LiveServer, model: ScriptedModelServer, session: str
) -> None:
    """A turn that changes an order's address and hands over to a human with a summary."""
    model.use(
        Script(
            [
                Reply.call(
                    "modify_pending_order_address", order_id=PENDING_ORDER, **SECRET_ADDRESS
                ),
                Reply.call(
                    "transfer_to_human_agents",
                    summary="Noah Brown lost my keys at 12 Hidden Lane and wants a call",
                ),
                Reply.say("Done, and a colleague will call you."),
            ]
        )
    )
    r = await client.post(
        f"/threads/{session}/messages",
        json={"content": "ship it to 12 Hidden Lane"},
        headers=server.headers(NOAH),
    )
    assert r.status_code == 200 and r.json()["status"] == "completed", r.text


def leaked(rows: list[dict[str, Any]]) -> list[str]:
    text = json.dumps(rows, default=str)
    return [s for s in SECRETS if s in text]


class TestDeleteThread:
    async def test_the_audit_trail_keeps_ids_tool_amounts_and_time_without_personal_fields(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
    ) -> None:
        await writes_with_personal_data(client, server, model_server, "d1")
        tid = f"{NOAH}:d1"
        before = await fetch_all(db, RECORDS, tid, tid)
        assert leaked(before)  # the records did hold the address and the summary

        deleted = await client.delete("/threads/d1", headers=server.headers(NOAH))
        assert deleted.status_code == 204
        after = await fetch_all(db, RECORDS, tid, tid)
        assert [(r["kind"], r["tool_name"], r["ok"], r["created_at"]) for r in after] == [
            (r["kind"], r["tool_name"], r["ok"], r["created_at"]) for r in before
        ]
        assert leaked(after) == []
        change = next(
            r
            for r in after
            if r["kind"] == "audit" and r["tool_name"] == "modify_pending_order_address"
        )
        assert change["arguments"] == {"order_id": PENDING_ORDER}
        order = json.loads(change["outcome"])
        assert order["order_id"] == PENDING_ORDER and order["user_id"] == NOAH
        assert "address" not in order
        assert all(set(i) == {"item_id", "product_id", "price"} for i in order["items"])
        assert sum(p["amount"] for p in order["payment_history"]) > 0

    def test_a_customer_record_keeps_only_its_id(self) -> None:
        customer = {
            "user_id": NOAH,
            "name": {"first_name": "Noah", "last_name": "Brown"},
            "address": SECRET_ADDRESS,
            "email": "noah@example.com",
            "payment_methods": {"credit_card_1": {"source": "credit_card", "last_four": "1234"}},
        }
        assert json.loads(redact_outcome(json.dumps(customer))) == {"user_id": NOAH}
        assert redact_outcome("Error: order #W1 is not pending.") == (
            "Error: order #W1 is not pending."
        )
        assert redact_outcome("{not json") == "[redacted]"
        assert redact_arguments({"user_id": NOAH, **SECRET_ADDRESS}) == {"user_id": NOAH}


def erase(database_url: str, user_id: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "app", "data", "erase", user_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


PER_THREAD_TABLES = (
    "threads",
    "runs",
    "checkpoints",
    "checkpoint_writes",
    "checkpoint_blobs",
    "transcript_archive",
)


async def rows_of(db: AsyncConnectionPool[Any], user_id: str) -> dict[str, int]:
    counts = {}
    for table in PER_THREAD_TABLES:
        row = await fetch_one(
            db,
            f"SELECT count(*) AS n FROM {table} WHERE starts_with(thread_id, %s)",
            f"{user_id}:",
        )
        counts[table] = row["n"]
    return counts


class TestEraseCommand:
    async def test_erase_removes_the_customers_conversations_and_memory_and_redacts_records(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
        database_url: str,
    ) -> None:
        await writes_with_personal_data(client, server, model_server, "e1")
        model_server.use(lambda _: Reply.say("hello"))
        for user, session in ((NOAH, "e2"), (MIA, "m1"), (LOOKALIKE, "x1")):
            r = await client.post(
                f"/threads/{session}/messages", json={"content": "hi"}, headers=server.headers(user)
            )
            assert r.status_code == 200
        async with db.connection() as conn:
            await conn.execute(
                "INSERT INTO transcript_archive (thread_id, seq, message) VALUES (%s, 0, %s)",
                (f"{NOAH}:e2", json.dumps({"content": "an early message"})),
            )
            # a step's pending write, as an interrupted step leaves one (a finished turn
            # stores none: app/db/checkpointer.py)
            await conn.execute(
                "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id,"
                " task_id, task_path, idx, channel, type, blob)"
                " SELECT thread_id, '', max(checkpoint_id), 'task-1', '', 0, 'messages',"
                " 'msgpack', '\\x00'::bytea FROM checkpoints WHERE thread_id = %s"
                " GROUP BY thread_id",
                (f"{NOAH}:e2",),
            )
        store = AsyncPostgresStore(db)
        for user in (NOAH, MIA, LOOKALIKE):
            await store.aput(namespace(user), "language", {"value": f"{user} likes French"})
        noah_before = await rows_of(db, NOAH)
        assert all(noah_before.values()), noah_before
        others_before = [await rows_of(db, other) for other in (MIA, LOOKALIKE)]

        done = erase(database_url, NOAH)

        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"erased {NOAH}: 2 threads, 2 runs, ")
        assert f"{noah_before['checkpoints']} checkpoints" in done.stdout
        assert "1 memories" in done.stdout and "1 handoff tickets redacted" in done.stdout
        assert set((await rows_of(db, NOAH)).values()) == {0}
        assert await store.asearch(namespace(NOAH)) == []
        records = await fetch_all(db, RECORDS, f"{NOAH}:e1", f"{NOAH}:e1")
        assert len(records) == 4 and leaked(records) == []  # two writes, each with its audit
        tickets = await fetch_all(db, "SELECT summary FROM handoff_tickets")
        assert tickets == [{"summary": "[erased]"}]
        assert [await rows_of(db, other) for other in (MIA, LOOKALIKE)] == others_before
        for other in (MIA, LOOKALIKE):
            assert len(await store.asearch(namespace(other))) == 1
        # the erased customer can start again
        model_server.use(lambda _: Reply.say("welcome back"))
        again = await client.post(
            "/threads/e1/messages", json={"content": "hi"}, headers=server.headers(NOAH)
        )
        assert again.status_code == 200 and again.json()["status"] == "completed"

    async def test_erase_is_refused_while_a_reply_is_running(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
        database_url: str,
    ) -> None:
        model_server.use(lambda _: Reply.say("hello"))
        r = await client.post(
            "/threads/b1/messages", json={"content": "hi"}, headers=server.headers(NOAH)
        )
        assert r.status_code == 200
        async with db.connection() as conn:  # a live run of another process holds the thread
            await conn.execute(
                "SELECT * FROM cs_claim_thread(%s, 'elsewhere', 'run-1', 60000)", (f"{NOAH}:b1",)
            )
        before = await rows_of(db, NOAH)

        done = erase(database_url, NOAH)

        assert done.returncode == 2
        assert "a reply is running" in done.stderr and "Traceback" not in done.stderr
        assert await rows_of(db, NOAH) == before

    def test_a_bad_user_id_is_one_line_of_error(self, database_url: str) -> None:
        done = erase(database_url, "no spaces allowed")
        assert done.returncode == 2 and done.stderr.startswith("error: a user id is")
