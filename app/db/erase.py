"""Personal data at the end of a thread or of a customer: what is removed, what is kept.

Deleting a thread removes its conversation (the route's delete). The records of the writes
it made stay, because the shop's books and the audit trail need them, but only as ids, the
tool, the outcome's status and amounts, and the time: addresses, names, emails and free text
are dropped from `tool_executions` and `audit_log` (`redact_arguments`, `redact_outcome`,
and the audit rows' before-images).
The day's model tokens are a counter per user (`token_usage`), which no thread's delete
touches, so a deleted thread does not give its tokens back to the day's budget.

Erasing a customer (`cs-agent data erase USER_ID`) removes every thread of theirs with its
checkpoints, transcript archive and runs, their remembered preferences, their token counts,
and redacts the same records, plus the summaries of their hand-over tickets. The shop's own
records of the customer (profile, orders, payments) are the shop's books and stay.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.db import before_images
from app.db.thread_tables import delete_statements
from app.db.writes import recorded_data
from app.jsontext import compact_json
from app.memory.store import namespace

# The write arguments a record keeps: ids, codes and amounts. Every other argument a write
# tool takes is marked PERSONAL on its type (an address, a hand-over summary) and dropped,
# as is any argument no write takes. The tools' registry derives this set from those marks
# and refuses to start if it differs (app/tools/registry.py): db sits below the tools.
KEPT_ARGUMENTS = frozenset(
    {"order_id", "user_id", "item_ids", "new_item_ids", "payment_method_id", "reason"}
)
# What stays of an order (or customer) a write returned.
OUTCOME_KEYS = frozenset(
    {
        "order_id",
        "user_id",
        "status",
        "items",
        "payment_history",
        "cancel_reason",
        "return_items",
        "return_payment_method_id",
        "exchange_items",
        "exchange_new_items",
        "exchange_payment_method_id",
        "exchange_price_difference",
    }
)
NESTED_KEYS = {
    "items": frozenset({"item_id", "product_id", "price"}),
    "payment_history": frozenset({"transaction_type", "amount", "payment_method_id"}),
}
REDACTED = "[redacted]"
ERASE_CLAIM_TTL_MS = 60_000
ERASED_SUMMARY = "[erased]"


def redact_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A write's arguments without the ones its tool marks personal (app/tools/spec.py), or
    any no write tool takes."""
    return {k: v for k, v in arguments.items() if k in KEPT_ARGUMENTS}


def redact_outcome(outcome: str) -> str:
    """An outcome holding data (the order or customer a write returned) keeps its ids,
    status and amounts. A sentence is the service's own words (a refusal, the hand-over
    notice) and stays."""
    try:
        value = recorded_data(outcome)
    except ValueError:
        return REDACTED
    if value is None:
        return outcome
    kept: dict[str, Any] = {}
    for key, item in value.items():
        if key not in OUTCOME_KEYS:
            continue
        allowed = NESTED_KEYS.get(key)
        if allowed is not None and isinstance(item, list):
            item = [
                {k: v for k, v in entry.items() if k in allowed}
                for entry in item
                if isinstance(entry, dict)
            ]
        kept[key] = item
    return compact_json(kept)


# The rows of a thread, or of a user: their threads and the writes made for them.
_THREAD = sql.SQL("thread_id = %(thread_id)s")
_USER_EXECUTIONS = sql.SQL("starts_with(thread_id, %(prefix)s) OR user_id = %(user_id)s")
_USER_AUDIT = sql.SQL("starts_with(thread_id, %(prefix)s) OR customer_id = %(user_id)s")
# A user's threads: those named by their id (a thread id begins with it), and those the
# index row gives them (each is claimed first, below).
_USER_THREADS = sql.SQL("starts_with(thread_id, %(prefix)s) OR thread_id = ANY(%(claimed)s)")
_ERASE_THREADS = delete_statements(_USER_THREADS)
_HANDOFF_SUMMARIES = """UPDATE handoff_tickets SET summary = %(erased)s
    WHERE (customer_id = %(user_id)s OR starts_with(thread_id, %(prefix)s))
      AND summary <> %(erased)s"""


async def _redact(
    conn: AsyncConnection[Any],
    table: str,
    id_column: str,
    where: sql.Composable,
    params: dict[str, Any],
) -> int:
    """Redact the matching rows of `table`; returns how many changed."""
    cur = await conn.execute(
        sql.SQL("SELECT {} AS id, arguments, outcome FROM {} WHERE {} FOR UPDATE").format(
            sql.Identifier(id_column), sql.Identifier(table), where
        ),
        params,
    )
    changed = []
    for row in await cur.fetchall():
        arguments, outcome = redact_arguments(row["arguments"]), redact_outcome(row["outcome"])
        if arguments != row["arguments"] or outcome != row["outcome"]:
            changed.append((Jsonb(arguments), outcome, row["id"]))
    if changed:
        async with conn.cursor() as cur:
            await cur.executemany(
                sql.SQL("UPDATE {} SET arguments = %s, outcome = %s WHERE {} = %s").format(
                    sql.Identifier(table), sql.Identifier(id_column)
                ),
                changed,
            )
    return len(changed)


async def _redact_images(
    conn: AsyncConnection[Any], where: sql.Composable, params: dict[str, Any]
) -> None:
    """The audit rows' before-images lose names, emails and addresses (ids, statuses and
    amounts stay, as in the rest of the record)."""
    cur = await conn.execute(
        sql.SQL(
            "SELECT id, before_image FROM audit_log WHERE ({}) AND before_image IS NOT NULL"
            " FOR UPDATE"
        ).format(where),
        params,
    )
    changed = []
    for row in await cur.fetchall():
        redacted = before_images.redact(row["before_image"])
        if redacted != row["before_image"]:
            changed.append((Jsonb(redacted), row["id"]))
    if changed:
        async with conn.cursor() as cur:
            await cur.executemany("UPDATE audit_log SET before_image = %s WHERE id = %s", changed)


async def redact_thread_records(pool: AsyncConnectionPool[Any], thread_id: str) -> int:
    params = {"thread_id": thread_id}
    async with pool.connection() as conn, conn.transaction():
        executions = await _redact(conn, "tool_executions", "idempotency_key", _THREAD, params)
        await _redact_images(conn, _THREAD, params)
        return executions + await _redact(conn, "audit_log", "id", _THREAD, params)


# What a delete runs first, in its transaction, with the threads it is about to delete:
# analytics computes and keeps their outcomes (app/analytics/sweep.py `keep_outcomes`),
# which outlive them. Passed in by the caller: this layer does not import analytics.
KeepOutcomes = Callable[[AsyncConnection[Any], list[str]], Awaitable[int]]


async def forget_thread(
    pool: AsyncConnectionPool[Any], thread_id: str, delete: Callable[[str], Awaitable[None]]
) -> None:
    """DELETE /threads/{id}: `delete` removes the conversation; then the thread's write
    records lose their personal fields."""
    await delete(thread_id)
    await redact_thread_records(pool, thread_id)


@dataclass(frozen=True)
class Erased:
    threads: int = 0
    runs: int = 0
    checkpoints: int = 0
    checkpoint_writes: int = 0
    checkpoint_blobs: int = 0
    transcript_messages: int = 0
    memories: int = 0
    token_counts: int = 0
    executions_redacted: int = 0
    audit_rows_redacted: int = 0
    handoff_tickets_redacted: int = 0
    outcomes_anonymised: int = 0  # analytics keeps the counts, not whose they were

    def summary(self) -> str:
        return ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in asdict(self).items())


class ThreadsBusy(ValueError):
    """A reply is running on one of the user's threads."""


def memory_prefix(user_id: str) -> str:
    # LangGraph's PostgresStore keeps a namespace as its parts joined by dots (a test reads
    # the erased preferences back through the store, so a change upstream shows there).
    return ".".join(namespace(user_id))


async def erase_user(
    pool: AsyncConnectionPool[Any], user_id: str, *, keep: KeepOutcomes | None = None
) -> Erased:
    """Remove everything the service keeps about a user's conversations, in one transaction.
    Refused (ThreadsBusy, nothing changed) while a reply runs on one of their threads.
    `keep` first stores the outcomes of threads not swept yet (anonymised below)."""
    params = {
        "user_id": user_id,
        "prefix": f"{user_id}:",
        "memory": memory_prefix(user_id),
        "items": f"users.{user_id}",
        "run": f"erase-{uuid.uuid4()}",
        "ttl_ms": ERASE_CLAIM_TTL_MS,
        "erased": ERASED_SUMMARY,
    }
    async with pool.connection() as conn, conn.transaction():

        async def delete(query: str | sql.Composed) -> int:
            cur = await conn.execute(query, params)
            return int(cur.rowcount)

        # Claim every thread as a run would (app/migrations/versions/0005, 0009): a reply running on
        # one refuses the erase, and a run that lost its claim can commit nothing after it.
        cur = await conn.execute(
            """SELECT mine.t, claim.generation FROM (
                   SELECT thread_id FROM threads WHERE user_id = %(user_id)s
                   UNION SELECT DISTINCT thread_id FROM checkpoints
                   WHERE starts_with(thread_id, %(prefix)s)
               ) AS mine (t),
               LATERAL cs_claim_thread(mine.t, 'erase', %(run)s, %(ttl_ms)s) AS claim""",
            params,
        )
        claimed = await cur.fetchall()
        if any(row["generation"] is None for row in claimed):
            raise ThreadsBusy("a reply is running on one of the user's threads; retry")
        if keep is not None:
            await keep(conn, [row["t"] for row in claimed])
        params["claimed"] = [row["t"] for row in claimed]
        await _redact_images(conn, _USER_AUDIT, params)
        deleted = {table: await delete(statement) for table, statement in _ERASE_THREADS}
        erased = Erased(
            checkpoint_writes=deleted["checkpoint_writes"],
            checkpoint_blobs=deleted["checkpoint_blobs"],
            checkpoints=deleted["checkpoints"],
            transcript_messages=deleted["transcript_archive"],
            runs=deleted["runs"],
            threads=deleted["threads"],
            # the agent's memory, and what the user kept through the LangGraph API's store
            # (app/api/lg/store_scope.py: the namespace ["users", <id>, ...])
            memories=await delete(
                """DELETE FROM store WHERE prefix = %(memory)s OR prefix = %(items)s
                   OR starts_with(prefix, %(items)s || '.')"""
            ),
            token_counts=await delete("DELETE FROM token_usage WHERE user_id = %(user_id)s"),
            executions_redacted=await _redact(
                conn, "tool_executions", "idempotency_key", _USER_EXECUTIONS, params
            ),
            audit_rows_redacted=await _redact(conn, "audit_log", "id", _USER_AUDIT, params),
            handoff_tickets_redacted=await delete(_HANDOFF_SUMMARIES),
        )
        # The conversations' outcomes stay for the shop's analytics, under an id that no
        # longer names the user (the thread id began with theirs).
        anonymised = await delete(
            """UPDATE conversation_outcomes
               SET user_id = NULL, thread_id = 'erased-' || md5(thread_id)
               WHERE user_id = %(user_id)s OR starts_with(thread_id, %(prefix)s)"""
        )
        # Released, not deleted: a lease's generation must never start again at 1.
        await conn.execute(
            """UPDATE thread_leases SET run_id = NULL, expires_at = clock_timestamp()
               WHERE run_id = %(run)s""",
            params,
        )
        return replace(erased, outcomes_anonymised=anonymised)
