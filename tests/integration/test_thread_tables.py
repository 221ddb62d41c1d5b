"""The one list of a thread's tables (app/db/thread_tables.py) against the migrated schema:
every table with a thread_id column is deleted with its thread, forgotten by a trigger on
`threads`, or kept on purpose, for a reason named here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool

import app.db
from app.db.thread_tables import THREAD_TABLES

# Deleted by AFTER DELETE triggers on `threads` (app/db/sql/40_control.sql, 50_webhooks.sql,
# 80_channels.sql), whichever path deletes the thread row.
FORGOTTEN_BY_TRIGGER = {
    "thread_events": "40_control.sql threads_forget_control",
    "control_history": "40_control.sql threads_forget_control",
    "webhook_outbox": "50_webhooks.sql threads_forget_webhooks",
    "channel_conversations": "80_channels.sql threads_forget_channel",
    "channel_outbox": "80_channels.sql threads_forget_channel",
    "channel_confirmations": "80_channels.sql threads_forget_channel",
}
KEPT = {
    "tool_executions": "the shop's books: redacted (app/db/erase.py), not deleted",
    "audit_log": "the audit trail: redacted, not deleted",
    "handoff_tickets": "the humans' queue: an erase redacts the summary",
    "conversation_outcomes": "analytics outlive the thread; an erase anonymises them",
    "thread_leases": "a lease's generation must never start again at 1",
    "held_claims": "a staff or rewind claim's note, dropped by the next dead-run sweep",
    "deleted_messages": "refuses a late duplicate of a deleted thread's message",
    "identity_codes": "rate limits guest codes per requester; expire on their own",
    "outbox": "the record of messages sent to a customer",
}


class TestThreadTables:
    async def test_every_table_with_a_thread_id_is_listed_or_kept_for_a_reason(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        async with pool.connection() as conn:
            cur = await conn.execute(
                """SELECT c.table_name FROM information_schema.columns c
                   JOIN information_schema.tables t USING (table_schema, table_name)
                   WHERE c.column_name = 'thread_id' AND c.table_schema = current_schema()
                     AND t.table_type = 'BASE TABLE'"""
            )
            with_thread_id = {row["table_name"] for row in await cur.fetchall()}
        accounted = (set(THREAD_TABLES) - {"run_event_chunks"}) | set(FORGOTTEN_BY_TRIGGER)
        assert with_thread_id - accounted - set(KEPT) == set()
        # and nothing named here is stale
        assert accounted | set(KEPT) <= with_thread_id
        assert not set(THREAD_TABLES) & (set(KEPT) | set(FORGOTTEN_BY_TRIGGER))

    async def test_the_run_log_has_no_thread_id_and_goes_with_its_runs(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        async with pool.connection() as conn:
            cur = await conn.execute(
                """SELECT column_name FROM information_schema.columns
                   WHERE table_name = 'run_event_chunks' AND table_schema = current_schema()"""
            )
            columns = {row["column_name"] for row in await cur.fetchall()}
        assert "run_id" in columns and "thread_id" not in columns
        assert THREAD_TABLES.index("run_event_chunks") < THREAD_TABLES.index("runs")

    async def test_the_triggers_named_exist(self, pool: AsyncConnectionPool[Any]) -> None:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'threads'::regclass"
            )
            triggers = {row["tgname"] for row in await cur.fetchall()}
        named = {reason.split()[1] for reason in FORGOTTEN_BY_TRIGGER.values()}
        assert named <= triggers

    async def test_the_triggers_delete_what_is_named_here_and_no_listed_table(
        self, pool: AsyncConnectionPool[Any]
    ) -> None:
        """Read from the trigger functions as installed: each table named as forgotten is
        deleted by the trigger named for it, and a table any of them deletes that has a
        thread_id is named here (never one of THREAD_TABLES, deleted twice)."""
        async with pool.connection() as conn:
            cur = await conn.execute(
                """SELECT t.tgname, pg_get_functiondef(t.tgfoid) AS body FROM pg_trigger t
                   WHERE t.tgrelid = 'threads'::regclass AND NOT t.tgisinternal"""
            )
            bodies = {row["tgname"]: row["body"] for row in await cur.fetchall()}
            cur = await conn.execute(
                """SELECT table_name FROM information_schema.columns
                   WHERE column_name = 'thread_id' AND table_schema = current_schema()"""
            )
            with_thread_id = {row["table_name"] for row in await cur.fetchall()}
        deleted_by = {
            table: trigger
            for trigger, body in bodies.items()
            for table in re.findall(r"DELETE\s+FROM\s+(\w+)", body, re.IGNORECASE)
            if table in with_thread_id
        }
        named = {table: reason.split()[1] for table, reason in FORGOTTEN_BY_TRIGGER.items()}
        assert deleted_by == named
        sql_dir = Path(app.db.__file__).parent / "sql"
        for reason in FORGOTTEN_BY_TRIGGER.values():
            file, trigger = reason.split()[:2]
            assert f"TRIGGER {trigger} AFTER DELETE ON threads" in (sql_dir / file).read_text()
