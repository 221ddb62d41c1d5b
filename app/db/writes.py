"""The single transactional write path: exactly-once per idempotency key, always audited.

One transaction holds the key's advisory lock, checks `tool_executions`, runs the action and
records its outcome, so the effect and its record commit together or not at all. The audit
row keeps the write's before-image: the rows it locked, as it found them
(app/db/before_images.py), for replaying a conversation from its start.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
import structlog
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from app.db import before_images
from app.db.checkpointer import store_held
from app.db.leases import fence
from app.db.trips import finished_on_error
from app.domain.errors import RuleViolation
from app.fencing import LeaseLost
from app.jsontext import compact_json
from app.tracing import traced
from app.turn import writing

log = structlog.get_logger(__name__)


def error_text(sentence: str) -> str:
    """A failed call as the model reads it, and the one place its prefix is written. The
    tools' results protocol (app/tools/results.py) builds every error with it; it sits here,
    below the tools, because a refused write is recorded with its text."""
    return f"Error: {sentence}"


TOOL_FAILED = error_text(
    "the request could not be completed; nothing was changed. Try again later."
)

# What an action gives back: the data it changed (an order, a customer), or a sentence.
Result = dict[str, Any] | str
WriteAction = Callable[[AsyncConnection[Any]], Awaitable[Result]]


@dataclass(frozen=True)
class WriteOutcome:
    ok: bool
    text: str  # as recorded: the sentence (a refusal's is an error's), or the data as JSON
    data: dict[str, Any] | None = None  # the data, when the write gave data
    replayed: bool = False  # True when the key had already run and nothing was done now

    @classmethod
    def of(cls, result: Result) -> WriteOutcome:
        if isinstance(result, str):
            return cls(True, result)
        return cls(True, compact_json(result), data=result)

    @classmethod
    def recorded(cls, ok: bool, text: str) -> WriteOutcome:
        """An outcome as `tool_executions` keeps it (a record that is not readable data
        reads as its text)."""
        try:
            data = recorded_data(text)
        except ValueError:
            data = None
        return cls(ok, text, data=data, replayed=True)


def recorded_data(text: str) -> dict[str, Any] | None:
    """The data a recorded outcome holds (money as exact Decimals), or None for a sentence.
    The record's own format: data is stored as a JSON object, and no sentence starts with
    a brace. Raises ValueError for a record that is neither."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    value = json.loads(text, parse_float=Decimal)
    if not isinstance(value, dict):
        raise ValueError("a recorded outcome holds an object or a sentence")
    return value


async def execute_write(
    pool: AsyncConnectionPool[Any],
    *,
    idempotency_key: str,
    thread_id: str,
    actor: str,
    customer_id: str | None,
    tool_name: str,
    arguments: Mapping[str, Any],
    action: WriteAction,
) -> WriteOutcome:
    """Run `action` once per key. A RuleViolation is recorded as an error outcome and
    rolls the action back; any other failure records nothing and returns a generic error."""
    with writing():  # a cancel waits for it
        return await _execute_write(
            pool,
            _Record(idempotency_key, thread_id, actor, customer_id, tool_name, arguments),
            action,
        )


@traced("write transaction", lambda _, record, __: {"gen_ai.tool.name": record.tool_name})
async def _execute_write(
    pool: AsyncConnectionPool[Any], record: _Record, action: WriteAction
) -> WriteOutcome:
    tool_name, thread_id = record.tool_name, record.thread_id
    try:
        # The run's checkpoints wait for a reason to be stored; this is one. The one holding
        # this write's tool call must be durable before the effect commits (if it cannot be
        # stored, nothing is written: app/db/checkpointer.py). In a transaction of its own,
        # not the write's: a process that dies while the write waits (a row lock, a slow
        # action) must leave the call stored, for the thread's next claim to finish it
        # (tests/faults/test_dead_runs.py); inside the write's it would roll back with it.
        await store_held()
        async with pool.connection() as conn:
            return await _once(conn, record, action)
    except LeaseLost:
        raise  # another run holds the thread now: this one stops, nothing was written
    except PoolTimeout:  # no connection: nothing was sent
        log.warning("write failed: no database connection", tool=tool_name, thread_id=thread_id)
        return await _failed(pool, record)
    except psycopg.OperationalError as error:
        # The connection broke: maybe after the COMMIT went out, whose answer was lost
        # (the write then ran). The database says which, not the broken connection.
        known = await _outcome_after_broken_connection(pool, record.key)
        if known is None:
            raise  # unknown for now: the run fails; the thread's next touch finds it out
        log.warning(
            "a write's connection broke; its outcome read back",
            tool=tool_name,
            thread_id=thread_id,
            committed=known.committed,
            error_type=type(error).__name__,
        )
        return known.outcome if known.committed else await _failed(pool, record)
    except Exception:
        log.exception("write failed", tool=tool_name, thread_id=thread_id)
        return await _failed(pool, record)


async def _failed(pool: AsyncConnectionPool[Any], record: _Record) -> WriteOutcome:
    failed = WriteOutcome(False, TOOL_FAILED)
    await _audit_best_effort(pool, record, failed)
    return failed


@dataclass(frozen=True)
class _ReadBack:
    committed: bool
    outcome: WriteOutcome


async def _outcome_after_broken_connection(
    pool: AsyncConnectionPool[Any], key: str
) -> _ReadBack | None:
    """What became of a write whose connection broke, or None when the database cannot
    say now. The key's advisory lock is taken first: the broken connection's transaction
    holds it until its backend has committed or rolled back, so what is read is final."""
    try:
        async with pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))
            cursor = await conn.execute(
                "SELECT ok, outcome FROM tool_executions WHERE idempotency_key = %s", (key,)
            )
            row = await cursor.fetchone()
    except psycopg.OperationalError:
        return None
    if row is None:  # rolled back: nothing was written
        return _ReadBack(False, WriteOutcome(False, TOOL_FAILED))
    return _ReadBack(True, WriteOutcome.recorded(bool(row["ok"]), str(row["outcome"])))


async def _once(conn: AsyncConnection[Any], record: _Record, action: WriteAction) -> WriteOutcome:
    """The write's transaction in three round trips and the action's own: BEGIN, the fence,
    the key's lock, the look-up of an earlier outcome and the savepoint go out together;
    the records of the outcome go out with the COMMIT. (psycopg's `transaction()` would
    send each of the first four alone, and the savepoint's release and the two inserts too:
    five more round trips a write, app/db/trips.py.)"""
    async with finished_on_error(conn):  # a lost lease raises LeaseLost, before the action
        async with conn.pipeline():
            await conn.execute("BEGIN")
            await fence(conn)  # only while this run's claim on its thread is its own
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (record.key,)
            )
            earlier = await conn.execute(
                "SELECT ok, outcome FROM tool_executions WHERE idempotency_key = %s",
                (record.key,),
            )
            await conn.execute("SAVEPOINT action")  # a refused rule leaves no trace
            previous = await earlier.fetchone()
        if previous is not None:
            await conn.execute("COMMIT")
            return WriteOutcome.recorded(previous["ok"], previous["outcome"])
        image: before_images.Image | None = None
        try:
            with before_images.collecting() as collected:
                outcome = WriteOutcome.of(await action(conn))
            image = collected  # kept only when the action went through
        except RuleViolation as refused:
            await conn.execute("ROLLBACK TO SAVEPOINT action")
            outcome = WriteOutcome(False, error_text(refused.message))
        async with conn.pipeline():
            await record.insert_execution(conn, outcome)
            await record.insert_audit(conn, outcome, image)
            await conn.execute("COMMIT")
        return outcome


async def recorded_outcome(
    pool: AsyncConnectionPool[Any], idempotency_key: str
) -> WriteOutcome | None:
    """The outcome a write with this key recorded, or None when it never ran (a crash
    repair closes the write's dangling call with it)."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT ok, outcome FROM tool_executions WHERE idempotency_key = %s",
            (idempotency_key,),
        )
        row = await cursor.fetchone()
    return None if row is None else WriteOutcome.recorded(bool(row["ok"]), str(row["outcome"]))


@dataclass(frozen=True)
class _Record:
    key: str
    thread_id: str
    actor: str
    customer_id: str | None
    tool_name: str
    arguments: Mapping[str, Any]

    def _arguments(self) -> Jsonb:
        return Jsonb(dict(self.arguments), dumps=_dumps)

    async def insert_execution(self, conn: AsyncConnection[Any], outcome: WriteOutcome) -> None:
        await conn.execute(
            "INSERT INTO tool_executions (idempotency_key, thread_id, user_id, tool_name,"
            " arguments, ok, outcome) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                self.key,
                self.thread_id,
                self.customer_id,
                self.tool_name,
                self._arguments(),
                outcome.ok,
                outcome.text,
            ),
        )

    async def insert_audit(
        self,
        conn: AsyncConnection[Any],
        outcome: WriteOutcome,
        image: before_images.Image | None = None,
    ) -> None:
        """The audit row, with the write's before-image (None: nothing was changed)."""
        await conn.execute(
            "INSERT INTO audit_log (actor, customer_id, thread_id, tool_name, arguments, ok,"
            " outcome, idempotency_key, before_image) VALUES (%s, %s, %s, %s, %s, %s, %s, %s,"
            " %s)",
            (
                self.actor,
                self.customer_id,
                self.thread_id,
                self.tool_name,
                self._arguments(),
                outcome.ok,
                outcome.text,
                self.key,
                None if image is None else Jsonb(image, dumps=_dumps),
            ),
        )


async def _audit_best_effort(
    pool: AsyncConnectionPool[Any], record: _Record, outcome: WriteOutcome
) -> None:
    try:
        async with pool.connection() as conn, conn.transaction():
            await record.insert_audit(conn, outcome)
    except Exception:
        log.exception("audit of a failed write failed", tool=record.tool_name)


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str, separators=(",", ":"))
