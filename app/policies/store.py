"""Policy versions in the database: read, create, publish, roll back, and the gate's tests.

Every change of state is one transaction that also writes its `policy_events` row, so the
record of who published what, when and (forced) why cannot miss a change. Two publishes at
once cannot both win: the live and candidate slots are unique indexes, and each change
locks the rows it moves first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.errors import UniqueViolation
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.errors import AppError, Conflict, NotFound

Json = dict[str, Any]
Pool = AsyncConnectionPool[Any]

VERSION_COLUMNS = (
    "version, instructions, procedures, note, parent, created_by, created_at, state, percent"
)
LATEST_TEST = """(SELECT to_jsonb(t) - 'compare' - 'markdown' FROM policy_tests t
    WHERE t.version = v.version ORDER BY t.created_at DESC, t.id DESC LIMIT 1) AS latest_test"""


class GateNotPassed(Conflict):
    code = "gate_not_passed"


def not_found(version: int) -> NotFound:
    return NotFound(f"no policy version {version}", code="policy_not_found")


@dataclass(frozen=True)
class Publish:
    version: int
    percent: int
    actor: str
    force: bool = False
    reason: str | None = None


_VERSIONS = f"SELECT {VERSION_COLUMNS}, {LATEST_TEST} FROM policy_versions v ORDER BY version"
_VERSION = f"SELECT {VERSION_COLUMNS}, {LATEST_TEST} FROM policy_versions v WHERE version = %s"
_STATE_FOR_UPDATE = (
    f"SELECT v.state, {LATEST_TEST} FROM policy_versions v WHERE version = %s FOR UPDATE"
)


async def _rows(conn: AsyncConnection[Any], sql: str, params: Sequence[Any] = ()) -> list[Json]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql, params)
        return list(await cur.fetchall())


async def list_versions(pool: Pool) -> list[Json]:
    async with pool.connection() as conn:
        return await _rows(
            conn,
            _VERSIONS,
        )


async def get_version(pool: Pool, version: int) -> Json:
    async with pool.connection() as conn:
        rows = await _rows(
            conn,
            _VERSION,
            (version,),
        )
        if not rows:
            raise not_found(version)
        events = await _rows(
            conn,
            """SELECT action, percent, actor, forced, reason, at FROM policy_events
               WHERE version = %s ORDER BY id""",
            (version,),
        )
    return {**rows[0], "events": events}


async def create_version(
    pool: Pool,
    *,
    instructions: str,
    procedures: Sequence[Mapping[str, Any]],
    note: str,
    parent: int | None,
    actor: str,
) -> int:
    async with pool.connection() as conn, conn.transaction():
        if parent is not None and not await _rows(
            conn, "SELECT 1 FROM policy_versions WHERE version = %s", (parent,)
        ):
            raise AppError(f"no policy version {parent} to start from", code="bad_parent")
        rows = await _rows(
            conn,
            """INSERT INTO policy_versions (instructions, procedures, note, parent, created_by)
               VALUES (%s, %s, %s, %s, %s) RETURNING version""",
            (instructions, Jsonb([dict(p) for p in procedures]), note, parent, actor),
        )
        version = int(rows[0]["version"])
        await _event(conn, version, "created", actor)
    return version


async def _event(
    conn: AsyncConnection[Any],
    version: int,
    action: str,
    actor: str,
    *,
    percent: int | None = None,
    forced: bool = False,
    reason: str | None = None,
) -> None:
    await conn.execute(
        """INSERT INTO policy_events (version, action, percent, actor, forced, reason)
           VALUES (%s, %s, %s, %s, %s, %s)""",
        (version, action, percent, actor, forced, reason),
    )


async def _lock_published(conn: AsyncConnection[Any]) -> dict[str, Json]:
    """The live and candidate rows, locked for this transaction (by state)."""
    rows = await _rows(
        conn,
        """SELECT version, state, percent FROM policy_versions
           WHERE state IN ('live', 'candidate') ORDER BY version FOR UPDATE""",
    )
    return {str(r["state"]): r for r in rows}


async def publish(pool: Pool, order: Publish) -> Json:
    """`percent` 100: the version goes live and the live one is retired; fewer: it becomes
    the candidate at that share. Refused (409 gate_not_passed) when its latest test did not
    pass, unless forced with a reason, which the event records with who forced it."""
    try:
        await _publish(pool, order)
    except UniqueViolation:  # another publish took the live or candidate slot meanwhile
        raise Conflict(
            "another change of the published versions came first; look again and retry",
            code="policy_conflict",
        ) from None
    return await get_version(pool, order.version)


async def _publish(pool: Pool, order: Publish) -> None:
    async with pool.connection() as conn, conn.transaction():
        published = await _lock_published(conn)
        rows = await _rows(
            conn,
            _STATE_FOR_UPDATE,
            (order.version,),
        )
        if not rows:
            raise not_found(order.version)
        state, test = rows[0]["state"], rows[0]["latest_test"]
        if state == "live":
            raise Conflict(f"version {order.version} is already live", code="already_live")
        if not order.force:
            _check_gate(order.version, test)
        candidate = published.get("candidate")
        live = published.get("live")
        if order.percent == 100:
            if live is not None:
                await _set_state(conn, int(live["version"]), "retired", None)
                await _event(conn, int(live["version"]), "retired", order.actor)
            await _set_state(conn, order.version, "live", None)
            action = "live"
        else:
            if candidate is not None and int(candidate["version"]) != order.version:
                raise Conflict(
                    f"version {candidate['version']} is the candidate: publish it at 100 or "
                    "roll it back first",
                    code="candidate_exists",
                )
            await _set_state(conn, order.version, "candidate", order.percent)
            action = "candidate"
        await _event(
            conn,
            order.version,
            action,
            order.actor,
            percent=order.percent,
            forced=order.force,
            reason=order.reason,
        )


def _check_gate(version: int, test: Json | None) -> None:
    if test is None:
        raise GateNotPassed(
            f"version {version} has not been tested; test it, or publish with force and a reason"
        )
    if test["status"] != "passed":
        raise GateNotPassed(
            f"version {version}'s latest test is {test['status']}; test it again, or publish "
            "with force and a reason"
        )


async def _set_state(
    conn: AsyncConnection[Any], version: int, state: str, percent: int | None
) -> None:
    await conn.execute(
        "UPDATE policy_versions SET state = %s, percent = %s WHERE version = %s",
        (state, percent, version),
    )


async def rollback(pool: Pool, actor: str) -> Json:
    """The candidate is retired; with none, the version live before the current one is
    live again. Threads of a retired version move to live at their next turn."""
    async with pool.connection() as conn, conn.transaction():
        published = await _lock_published(conn)
        candidate, live = published.get("candidate"), published.get("live")
        if candidate is not None:
            retired = int(candidate["version"])
            await _set_state(conn, retired, "retired", None)
            await _event(conn, retired, "retired", actor, reason="rollback")
            return {"retired": retired, "live": live["version"] if live else None}
        if live is None:
            raise Conflict("no version is live", code="nothing_to_roll_back")
        current = int(live["version"])
        previous = await _rows(
            conn,
            """SELECT version FROM policy_events
               WHERE action = 'live' AND version <> %s ORDER BY id DESC LIMIT 1""",
            (current,),
        )
        if not previous:
            raise Conflict(
                f"version {current} is the first live version: nothing to roll back to",
                code="nothing_to_roll_back",
            )
        back = int(previous[0]["version"])
        await _set_state(conn, current, "retired", None)
        await _event(conn, current, "retired", actor, reason="rollback")
        await _set_state(conn, back, "live", None)
        await _event(conn, back, "live", actor, percent=100, reason="rollback")
    return {"retired": current, "live": back}


async def live_version(pool: Pool) -> int:
    async with pool.connection() as conn:
        rows = await _rows(conn, "SELECT version FROM policy_versions WHERE state = 'live'")
    if not rows:
        raise Conflict("no version is live", code="no_live_version")
    return int(rows[0]["version"])


async def thread_policy(pool: Pool, thread_id: str) -> int | None:
    async with pool.connection() as conn:
        rows = await _rows(
            conn, "SELECT policy_version FROM threads WHERE thread_id = %s", (thread_id,)
        )
    return rows[0]["policy_version"] if rows else None


# -- the gate's tests ------------------------------------------------------------------------


async def start_test(pool: Pool, test_id: str, version: int, baseline: int, actor: str) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            """INSERT INTO policy_tests (id, version, baseline, created_by)
               VALUES (%s, %s, %s, %s)""",
            (test_id, version, baseline, actor),
        )


async def finish_test(
    pool: Pool,
    test_id: str,
    status: str,
    *,
    compare: Json | None = None,
    markdown: str | None = None,
    error: str | None = None,
) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            """UPDATE policy_tests SET status = %s, compare = %s, markdown = %s, error = %s,
                      finished_at = now()
               WHERE id = %s""",
            (
                status,
                Jsonb(json.loads(json.dumps(compare, default=str))) if compare else None,
                markdown,
                error,
                test_id,
            ),
        )


async def get_test(pool: Pool, version: int, test_id: str) -> Json:
    async with pool.connection() as conn:
        rows = await _rows(
            conn,
            "SELECT * FROM policy_tests WHERE id = %s AND version = %s",
            (test_id, version),
        )
    if not rows:
        raise NotFound("no such test of this version", code="policy_test_not_found")
    return rows[0]


async def version_row(pool: Pool, version: int) -> Json:
    async with pool.connection() as conn:
        rows = await _rows(
            conn,
            "SELECT version, instructions, procedures FROM policy_versions WHERE version = %s",
            (version,),
        )
    if not rows:
        raise not_found(version)
    return rows[0]


def bucket(thread_id: str) -> int:
    """The thread's share bucket, 0-99, as `cs_begin_run` computes it (migration 0024): a
    thread is the candidate's when its bucket is under the candidate's percent."""
    return int(hashlib.md5(thread_id.encode()).hexdigest()[:8], 16) % 100
