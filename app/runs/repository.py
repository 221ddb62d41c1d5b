"""The thread index and run records (tables `threads`, `runs`). Parametrised SQL only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.db.checkpointer import HeldRows
from app.db.thread_tables import OUR_TABLES, delete_statements
from app.fencing import Lease
from app.runs.statements import (
    ABANDON_DEAD,
    BEGIN_RUN,
    CLOSE_RUN,
    CLOSE_RUN_HANDOFF,
    EVENTS,
    LATEST_CHECKPOINT,
    LOGS_AFTER,
    REMEMBER_DELETED,
    Begun,
    begun,
    close_params,
    log_json,
)

_RUN_FIELDS = """run_id, status, created_at, finished_at, owner, ttft_ms,
    result->'usage' AS usage, result->>'checkpoint_id' AS checkpoint_id, policy_version"""
_OPEN_RUN = f"""INSERT INTO runs (run_id, thread_id, client_message_id, status, owner)
    VALUES (%(run_id)s, %(thread_id)s, %(client_message_id)s, 'running', %(owner)s)
    RETURNING ({LATEST_CHECKPOINT}) AS checkpoint_id"""
_LIST_RUNS = f"""SELECT {_RUN_FIELDS} FROM runs WHERE thread_id = %s
    ORDER BY created_at DESC LIMIT %s"""
# The run's record with, when it holds the thread now, its lease's liveness.
_RUN = f"""SELECT {_RUN_FIELDS}, {EVENTS},
        EXISTS (SELECT 1 FROM thread_leases l
                WHERE l.thread_id = runs.thread_id AND l.run_id = runs.run_id
                  AND l.expires_at > clock_timestamp()) AS held
    FROM runs WHERE thread_id = %s AND run_id = %s"""

# DELETE /threads: the checkpointer deletes its own tables first (app/runs/inspect.py).
_DELETE_THREAD = delete_statements(sql.SQL("thread_id = %s"), OUR_TABLES)

# A cancel or a log request, and the NOTIFY that wakes the run's owner at once
# (app/db/sql/60_notify.sql); its poll finds it within REQUEST_POLL_S otherwise.
_REQUEST = """WITH asked AS (
        UPDATE runs SET {column} = true
        WHERE thread_id = %s AND run_id = %s AND status = 'running'
        RETURNING run_id
    )
    SELECT run_id, pg_notify('cs_run_requests', '') FROM asked"""


class RunRepository:
    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool

    async def create_thread(self, thread_id: str, user_id: str, session_id: str) -> datetime:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """INSERT INTO threads (thread_id, user_id, session_id) VALUES (%s, %s, %s)
                   ON CONFLICT (thread_id) DO UPDATE SET thread_id = EXCLUDED.thread_id
                   RETURNING created_at""",
                (thread_id, user_id, session_id),
            )
            row = await cur.fetchone()
            assert row is not None
            created: datetime = row["created_at"]
            return created

    async def thread(self, thread_id: str) -> dict[str, Any] | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT * FROM threads WHERE thread_id = %s", (thread_id,))
            row: dict[str, Any] | None = await cur.fetchone()
            return row

    async def list_threads(
        self, user_id: str, limit: int, after: tuple[datetime, str] | None
    ) -> list[dict[str, Any]]:
        sql = "SELECT * FROM threads WHERE user_id = %s"
        params: list[Any] = [user_id]
        if after is not None:
            sql += " AND (updated_at, session_id) < (%s, %s)"
            params += [after[0], after[1]]
        sql += " ORDER BY updated_at DESC, session_id DESC LIMIT %s"
        params.append(limit)
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            rows: list[dict[str, Any]] = await cur.fetchall()
            return rows

    # -- thread metadata (the LangGraph API's tags, app/api/lg/threads.py) -----------------

    async def create_thread_with_metadata(
        self, thread_id: str, user_id: str, session_id: str, metadata: dict[str, Any]
    ) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO threads (thread_id, user_id, session_id, metadata)
                   VALUES (%s, %s, %s, %s) ON CONFLICT (thread_id) DO NOTHING""",
                (thread_id, user_id, session_id, Jsonb(metadata)),
            )

    async def merge_thread_metadata(self, thread_id: str, metadata: dict[str, Any]) -> bool:
        """The keys given replace theirs and the others stay (jsonb `||`, as the official
        server merges). False when there is no such thread."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """UPDATE threads SET metadata = metadata || %s, updated_at = now()
                   WHERE thread_id = %s RETURNING thread_id""",
                (Jsonb(metadata), thread_id),
            )
            return await cur.fetchone() is not None

    async def set_message_count(self, thread_id: str, count: int) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE threads SET updated_at = now(), message_count = %s WHERE thread_id = %s",
                (count, thread_id),
            )

    async def delete_thread(self, thread_id: str) -> None:
        """The thread's rows in every table but the checkpointer's (app/db/thread_tables.py),
        all or none."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(REMEMBER_DELETED, (thread_id,))
            for _, statement in _DELETE_THREAD:
                await conn.execute(statement, (thread_id,))

    async def begin_run(
        self,
        *,
        run_id: str,
        thread_id: str,
        user_id: str,
        session_id: str,
        client_message_id: str | None,
        owner: str,
        ttl_ms: int,
        rate: dict[str, Any],
        budget: int,
    ) -> Begun:
        """Check the post rate (`rate`: key, interval_s, window_s; or empty) and the day's
        token `budget` (0: none), claim the thread, record the run and read the checkpoint
        it starts from: one statement."""
        params = {
            "thread_id": thread_id,
            "user_id": user_id,
            "session_id": session_id,
            "owner": owner,
            "run_id": run_id,
            "ttl_ms": ttl_ms,
            "client_message_id": client_message_id,
            "rate_key": rate.get("key"),
            "interval_s": rate.get("interval_s"),
            "window_s": rate.get("window_s"),
            "budget": budget,
        }
        async with self.pool.connection() as conn:
            cur = await conn.execute(BEGIN_RUN, params, binary=True)
            row = await cur.fetchone()
        assert row is not None
        return begun(thread_id, row)

    async def discard_run(self, lease: Lease) -> None:
        """A run that never started (nothing to resume, a replayed message, an error before
        its launch): its record goes and its lease is released, in one statement."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """WITH gone AS (
                       DELETE FROM runs WHERE run_id = %(run_id)s AND status = 'running'
                   )
                   UPDATE thread_leases SET run_id = NULL, expires_at = clock_timestamp()
                   WHERE thread_id = %(thread_id)s AND generation = %(generation)s
                     AND run_id = %(run_id)s""",
                {
                    "run_id": lease.run_id,
                    "thread_id": lease.thread_id,
                    "generation": lease.generation,
                },
            )

    async def retry_run(
        self, run_id: str, thread_id: str, client_message_id: str, owner: str | None = None
    ) -> str | None:
        """Give the client_message_id of a run that failed or died to a new run `run_id`,
        recorded as running; returns the checkpoint it starts from. The earlier run stays
        on record, without the id (one still 'running' as 'abandoned')."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                """UPDATE runs SET client_message_id = NULL,
                          status = CASE WHEN status = 'running' THEN 'abandoned' ELSE status END,
                          finished_at = coalesce(finished_at, now())
                   WHERE thread_id = %s AND client_message_id = %s""",
                (thread_id, client_message_id),
            )
            cur = await conn.execute(
                _OPEN_RUN,
                {
                    "run_id": run_id,
                    "thread_id": thread_id,
                    "client_message_id": client_message_id,
                    "owner": owner,
                },
            )
            row = await cur.fetchone()
            checkpoint_id = row["checkpoint_id"] if row else None
            return str(checkpoint_id) if checkpoint_id else None

    async def run_for_client_message(
        self, thread_id: str, client_message_id: str
    ) -> dict[str, Any] | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT * FROM runs WHERE thread_id = %s AND client_message_id = %s",
                (thread_id, client_message_id),
            )
            row: dict[str, Any] | None = await cur.fetchone()
            return row

    async def close_run(
        self,
        run_id: str,
        thread_id: str,
        status: str,
        result: dict[str, Any],
        *,
        title: str | None,
        added: int,
        events: list[Any] | None = None,
        lease: Lease | None = None,
        user_id: str | None = None,
        handoff: dict[str, Any] | None = None,
        ttft_ms: int | None = None,
        held: HeldRows | None = None,
    ) -> str | None:
        """Record a run's outcome with the checkpoint it ended on, the thread's activity, the
        part of its log not shipped yet (`events`, as the last chunk), the day's tokens of
        `user_id`, a `handoff` (the thread then waits for a person), and release `lease`:
        one statement (with the steps `held` back, if any: one fenced transaction). Returns
        that checkpoint's id.

        The tokens are counted once: only while the run has no result recorded yet, so a
        retry of a close that did commit adds nothing. `added` messages joined the transcript
        (summaries never remove from it, so the count only grows; a rewind sets it with
        `set_message_count`)."""
        params = close_params(
            run_id, thread_id, status, result, title, added, events, lease, user_id, handoff
        )
        params["ttft_ms"] = ttft_ms
        query = CLOSE_RUN if handoff is None else CLOSE_RUN_HANDOFF
        if held is not None and held.batches:
            row = await held.store_then(query, params)
        else:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(query, params)).fetchone()
        checkpoint_id = row["checkpoint_id"] if row else None
        return str(checkpoint_id) if checkpoint_id else None

    # -- runs you can come back to (app/runs/logs.py) --------------------------------------

    async def list_runs(self, thread_id: str, limit: int) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_LIST_RUNS, (thread_id, limit))
            rows: list[dict[str, Any]] = await cur.fetchall()
            return rows

    async def run(self, thread_id: str, run_id: str) -> dict[str, Any] | None:
        """The run's record with, when it holds the thread now, its lease's liveness."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(_RUN, (thread_id, run_id))
            row: dict[str, Any] | None = await cur.fetchone()
            return row

    async def request(self, thread_id: str, run_id: str, what: str) -> bool:
        """Ask the run's owner to cancel it ('cancel') or to ship its log ('tail'). False
        when the run is not running."""
        column = {"cancel": "cancel_requested", "tail": "tail_requested"}[what]
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL(_REQUEST).format(column=sql.Identifier(column)), (thread_id, run_id)
            )
            return await cur.fetchone() is not None

    async def requests_for(self, run_ids: list[str]) -> list[dict[str, Any]]:
        """What has been asked of these runs (the owner's poll)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT run_id, cancel_requested, tail_requested FROM runs
                   WHERE run_id = ANY(%s) AND (cancel_requested OR tail_requested)""",
                (run_ids,),
            )
            rows: list[dict[str, Any]] = await cur.fetchall()
            return rows

    async def append_events(self, run_id: str, records: list[Any]) -> None:
        """A chunk of a running run's log; it wakes the readers of other replicas
        (`cs_run_events`) when one asked to follow the run."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """WITH chunk AS (
                       INSERT INTO run_event_chunks (run_id, first_seq, last_seq, events)
                       VALUES (%s, %s, %s, %s)
                       ON CONFLICT (run_id, first_seq) DO UPDATE
                           SET last_seq = EXCLUDED.last_seq, events = EXCLUDED.events
                           WHERE run_event_chunks.last_seq < EXCLUDED.last_seq
                       RETURNING run_id)
                   SELECT pg_notify('cs_run_events', '')
                   FROM chunk JOIN runs r USING (run_id) WHERE r.tail_requested""",
                (run_id, records[0][0], records[-1][0], Jsonb(records, dumps=log_json)),
            )

    async def events_after(self, run_id: str, after: int) -> list[Any]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT events FROM run_event_chunks WHERE run_id = %s AND last_seq > %s
                   ORDER BY first_seq""",
                (run_id, after),
            )
            return [record for row in await cur.fetchall() for record in row["events"]]

    async def logs_after(self, follows: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
        """For each (thread, run, after): the run's status (None: no such run), whether a
        live lease holds it, and its stored records after `after`; one statement for every
        run this process's readers follow (app/runs/logs.py `RunLogFeed`)."""
        threads, runs, afters = (list(c) for c in zip(*follows, strict=True))
        async with self.pool.connection() as conn:
            cur = await conn.execute(LOGS_AFTER, (threads, runs, afters))
            rows: list[dict[str, Any]] = await cur.fetchall()
            return rows

    async def abandon_dead(self, grace_s: float) -> int:
        """Close the runs of processes that died on threads nobody claims again."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(ABANDON_DEAD, {"grace_s": grace_s})
            return int(cur.rowcount)

    async def prune_logs(self, keep_s: float) -> int:
        """Drop the event logs stored more than `keep_s` ago, but a running run's (the runs
        stay), and deleted threads' message ids as old. No run row is rewritten."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """WITH ids AS (DELETE FROM deleted_messages
                                WHERE deleted_at < now() - make_interval(secs => %s))
                   DELETE FROM run_event_chunks c
                   WHERE c.created_at < now() - make_interval(secs => %s)
                     AND NOT EXISTS (SELECT 1 FROM runs r
                                     WHERE r.run_id = c.run_id AND r.status = 'running')""",
                (keep_s, keep_s),
            )
            return int(cur.rowcount)
