"""The write ledger's rows for remote calls (`tool_executions`, migration 0023).

A remote call cannot join our transaction, so its row is committed in state `sent` before
the request leaves (fenced by the run's lease, like every commit of a run), and updated
once with the result (`done`, audited). A call that never got its result and may not be
resent is marked `unknown`, audited, and handed to a person with a ticket naming the tool,
its arguments and its key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.db.checkpointer import store_held
from app.db.leases import fence

State = Literal["sent", "done", "unknown"]


@dataclass(frozen=True)
class Prior:
    """The row an earlier attempt of the same call left."""

    state: State
    ok: bool
    outcome: str
    attempts: int


@dataclass(frozen=True)
class CallRecord:
    key: str
    thread_id: str
    actor: str
    customer_id: str | None
    tool_name: str
    arguments: Mapping[str, Any]

    def _arguments(self) -> Jsonb:
        return Jsonb(dict(self.arguments), dumps=_dumps)


async def claim(pool: AsyncConnectionPool[Any], record: CallRecord) -> Prior | None:
    """Record the call as `sent` (committed): None; or the row an earlier attempt left.
    The checkpoint holding the call is stored first, so a crash after the send leaves a
    call the next turn finds (app/agent/repair.py)."""
    await store_held()
    async with pool.connection() as conn, conn.transaction():
        await fence(conn)
        cursor = await conn.execute(
            "INSERT INTO tool_executions (idempotency_key, thread_id, user_id, tool_name,"
            " arguments, ok, outcome, state, attempts)"
            " VALUES (%s, %s, %s, %s, %s, false, '', 'sent', 1)"
            " ON CONFLICT (idempotency_key) DO NOTHING RETURNING 1",
            (
                record.key,
                record.thread_id,
                record.customer_id,
                record.tool_name,
                record._arguments(),
            ),
        )
        if await cursor.fetchone() is not None:
            return None
        found = await conn.execute(
            "SELECT state, ok, outcome, attempts FROM tool_executions"
            " WHERE idempotency_key = %s FOR UPDATE",
            (record.key,),
        )
        row = await found.fetchone()
    assert row is not None
    return Prior(row["state"], bool(row["ok"]), str(row["outcome"]), int(row["attempts"]))


async def prior(pool: AsyncConnectionPool[Any], key: str) -> Prior | None:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT state, ok, outcome, attempts FROM tool_executions WHERE idempotency_key = %s",
            (key,),
        )
        row = await cursor.fetchone()
    if row is None:
        return None
    return Prior(row["state"], bool(row["ok"]), str(row["outcome"]), int(row["attempts"]))


async def resend(pool: AsyncConnectionPool[Any], key: str, most: int) -> bool:
    """Count one more send of a call still `sent`, committed before it goes; False when
    it was sent `most` times already (or is settled)."""
    async with pool.connection() as conn, conn.transaction():
        cursor = await conn.execute(
            "UPDATE tool_executions SET attempts = attempts + 1"
            " WHERE idempotency_key = %s AND state = 'sent' AND attempts < %s RETURNING 1",
            (key, most),
        )
        return await cursor.fetchone() is not None


async def forget(pool: AsyncConnectionPool[Any], key: str) -> None:
    """The first send never left (the server refused the connection): no row, so the
    call may be made again."""
    async with pool.connection() as conn:
        await conn.execute(
            "DELETE FROM tool_executions WHERE idempotency_key = %s AND state = 'sent'"
            " AND attempts = 1",
            (key,),
        )


async def finish(
    pool: AsyncConnectionPool[Any], record: CallRecord, ok: bool, outcome: str
) -> tuple[bool, str]:
    """Store the result, and audit it. The first result stands: a call already settled
    keeps its own, which is returned. Not fenced: what the server did is true whichever
    run holds the thread now."""
    async with pool.connection() as conn, conn.transaction():
        cursor = await conn.execute(
            "UPDATE tool_executions SET state = 'done', ok = %s, outcome = %s"
            " WHERE idempotency_key = %s AND state = 'sent' RETURNING ok, outcome",
            (ok, outcome, record.key),
        )
        row = await cursor.fetchone()
        if row is None:
            earlier = await conn.execute(
                "SELECT ok, outcome FROM tool_executions WHERE idempotency_key = %s",
                (record.key,),
            )
            row = await earlier.fetchone()
            return (bool(row["ok"]), str(row["outcome"])) if row else (ok, outcome)
        await _audit(conn, record, ok, outcome)
    return ok, outcome


async def mark_unknown(
    pool: AsyncConnectionPool[Any], record: CallRecord, observation: str, summary: str
) -> None:
    """No result came back and the call may not be resent: `unknown`, audited, and a
    ticket for the person the thread is handed to."""
    async with pool.connection() as conn, conn.transaction():
        cursor = await conn.execute(
            "UPDATE tool_executions SET state = 'unknown', ok = false, outcome = %s"
            " WHERE idempotency_key = %s AND state = 'sent' RETURNING 1",
            (observation, record.key),
        )
        if await cursor.fetchone() is None:
            return  # settled meanwhile
        await _audit(conn, record, False, observation)
        await conn.execute(
            "INSERT INTO handoff_tickets (customer_id, thread_id, summary) VALUES (%s, %s, %s)",
            (record.customer_id, record.thread_id, summary),
        )


async def _audit(conn: Any, record: CallRecord, ok: bool, outcome: str) -> None:
    await conn.execute(
        "INSERT INTO audit_log (actor, customer_id, thread_id, tool_name, arguments, ok,"
        " outcome, idempotency_key) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (
            record.actor,
            record.customer_id,
            record.thread_id,
            record.tool_name,
            record._arguments(),
            ok,
            outcome,
            record.key,
        ),
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str, separators=(",", ":"))
