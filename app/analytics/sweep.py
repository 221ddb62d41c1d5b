"""The outcome sweep: each idle or handed-off conversation gets its outcome, upserted.

`keep_outcomes` computes the outcomes of threads about to be deleted, in the deleting
transaction, idle or not: an outcome outlives its thread, and is computed before it goes.

A thread is due when it has a run, none of its runs is still going, it is idle for
`CONVERSATION_IDLE_MIN` (no turn, no run started) or a person has it (handed off), and it
has no outcome or had activity since its outcome was computed. A handed-off conversation's
outcome is taken at the handoff, not after idleness, so it follows what comes next at once
too: the person, then the agent again after a hand-back (else it stayed as it was at the
handoff until the conversation went quiet). So a sweep that stopped half
way (a crash, the database away) leaves the rest due, and one run again finds nothing to do.

Like the retention sweep, every batch is one transaction that first takes
`pg_try_advisory_xact_lock`: one sweep at a time across replicas (PgBouncer in transaction
mode too); a replica that finds the lock taken skips this round. Rows are upserted by thread
id, so even two sweeps that raced would leave one outcome per conversation.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.analytics.outcome import Outcome, Rules, RunRecord, ThreadRecord, WriteRecord, compute
from app.config import Settings
from app.db import lock_keys
from app.db.erase import KeepOutcomes

OUTCOMES_LOCK_KEY = lock_keys.OUTCOMES
# A run still 'running' this long after it started is taken as dead (its process died);
# its thread becomes due again.
RUNNING_GRACE_S = 60.0

_DUE = """SELECT t.thread_id, t.user_id, t.created_at,
        greatest(t.updated_at, a.last_run) AS activity_at
    FROM threads t
    CROSS JOIN LATERAL (SELECT max(r.created_at) AS last_run FROM runs r
        WHERE r.thread_id = t.thread_id) a
    LEFT JOIN thread_leases l ON l.thread_id = t.thread_id
    LEFT JOIN conversation_outcomes o ON o.thread_id = t.thread_id
    WHERE t.thread_id > %(after)s AND a.last_run IS NOT NULL
      AND (greatest(t.updated_at, a.last_run) < now() - make_interval(secs => %(idle_s)s)
           OR coalesce(l.control, 'agent') <> 'agent' OR o.result = 'handed_off')
      AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.thread_id = t.thread_id
          AND r.status = 'running'
          AND r.created_at > now() - make_interval(secs => %(running_s)s))
      AND (o.thread_id IS NULL OR o.activity_at < greatest(t.updated_at, a.last_run))
    ORDER BY t.thread_id LIMIT %(limit)s"""
# The threads about to be deleted, idle or not (a delete holds each one's claim).
_NAMED = """SELECT t.thread_id, t.user_id, t.created_at,
        greatest(t.updated_at, a.last_run) AS activity_at
    FROM threads t
    CROSS JOIN LATERAL (SELECT max(r.created_at) AS last_run FROM runs r
        WHERE r.thread_id = t.thread_id) a
    WHERE t.thread_id = ANY(%s) AND a.last_run IS NOT NULL"""
_RUNS = """SELECT thread_id, run_id, status, result, created_at, finished_at, ttft_ms FROM runs
    WHERE thread_id = ANY(%s) ORDER BY thread_id, created_at, run_id"""
_ERRORS = """SELECT c.run_id, e.value -> 2 ->> 'code' AS code
    FROM runs r JOIN run_event_chunks c ON c.run_id = r.run_id
    CROSS JOIN LATERAL jsonb_array_elements(c.events) e
    WHERE r.thread_id = ANY(%s) AND e.value ->> 1 = 'error'
    ORDER BY c.run_id, c.first_seq"""
_WRITES = """SELECT thread_id, tool_name, ok FROM tool_executions WHERE thread_id = ANY(%s)
    ORDER BY created_at"""
_CONTROL = """SELECT l.thread_id, l.control, l.control_reason,
        (SELECT min(h.at) FROM control_history h
            WHERE h.thread_id = l.thread_id AND h.action = 'handoff') AS handoff_at,
        (SELECT min(k.created_at) FROM handoff_tickets k
            WHERE k.thread_id = l.thread_id) AS ticket_at
    FROM thread_leases l WHERE l.thread_id = ANY(%s)"""
# A conversation that went on since it was judged is judged again (the judge's spend stays).
_SAME = "conversation_outcomes.activity_at = EXCLUDED.activity_at"
_JUDGED_AGAIN = f"""score = CASE WHEN {_SAME} THEN conversation_outcomes.score END,
        score_reasons = CASE WHEN {_SAME} THEN conversation_outcomes.score_reasons END,
        judged_at = CASE WHEN {_SAME} THEN conversation_outcomes.judged_at END,
        judge_error = CASE WHEN {_SAME} THEN conversation_outcomes.judge_error END,
        judge_attempts = CASE WHEN {_SAME} THEN conversation_outcomes.judge_attempts ELSE 0 END"""
_UPSERT = f"""INSERT INTO conversation_outcomes (thread_id, user_id, result, handoff_reason,
        turns, duration_s, ttft_p50_ms, ttft_runs_ms, tool_calls, tool_errors, tool_calls_by_tool,
        tool_errors_by_tool, breaker_trips, confirmations_asked, confirmations_approved,
        confirmations_declined, writes_by_tool, model_calls, tokens_in, tokens_out, cost_usd,
        flags, started_at, ended_at, activity_at, computed_at)
    VALUES (%(thread_id)s, %(user_id)s, %(result)s, %(handoff_reason)s, %(turns)s,
        %(duration_s)s, %(ttft_p50_ms)s, %(ttft_runs_ms)s, %(tool_calls)s, %(tool_errors)s,
        %(tool_calls_by_tool)s, %(tool_errors_by_tool)s, %(breaker_trips)s,
        %(confirmations_asked)s, %(confirmations_approved)s, %(confirmations_declined)s,
        %(writes_by_tool)s, %(model_calls)s, %(tokens_in)s, %(tokens_out)s, %(cost_usd)s,
        %(flags)s, %(started_at)s, %(ended_at)s, %(activity_at)s, now())
    ON CONFLICT (thread_id) DO UPDATE SET
        user_id = EXCLUDED.user_id, result = EXCLUDED.result,
        handoff_reason = EXCLUDED.handoff_reason, turns = EXCLUDED.turns,
        duration_s = EXCLUDED.duration_s, ttft_p50_ms = EXCLUDED.ttft_p50_ms,
        ttft_runs_ms = EXCLUDED.ttft_runs_ms,
        tool_calls = EXCLUDED.tool_calls, tool_errors = EXCLUDED.tool_errors,
        tool_calls_by_tool = EXCLUDED.tool_calls_by_tool,
        tool_errors_by_tool = EXCLUDED.tool_errors_by_tool,
        breaker_trips = EXCLUDED.breaker_trips,
        confirmations_asked = EXCLUDED.confirmations_asked,
        confirmations_approved = EXCLUDED.confirmations_approved,
        confirmations_declined = EXCLUDED.confirmations_declined,
        writes_by_tool = EXCLUDED.writes_by_tool, model_calls = EXCLUDED.model_calls,
        tokens_in = EXCLUDED.tokens_in, tokens_out = EXCLUDED.tokens_out,
        cost_usd = EXCLUDED.cost_usd, flags = EXCLUDED.flags,
        started_at = EXCLUDED.started_at, ended_at = EXCLUDED.ended_at,
        activity_at = EXCLUDED.activity_at, computed_at = now(),
        {_JUDGED_AGAIN}"""
_JSON_COLUMNS = ("tool_calls_by_tool", "tool_errors_by_tool", "writes_by_tool", "flags")


@dataclass(frozen=True)
class SweepPolicy:
    idle_s: float = 1800.0
    batch_size: int = 100
    rules: Rules = field(default_factory=Rules)

    @classmethod
    def from_settings(cls, settings: Settings, *, idle_min: float | None = None) -> SweepPolicy:
        minutes = settings.conversation_idle_min if idle_min is None else idle_min
        return cls(
            idle_s=minutes * 60.0,
            batch_size=settings.outcomes_batch_size,
            rules=Rules(
                late_handoff_turns=settings.late_handoff_turns,
                slow_answer_s=settings.slow_answer_s,
                price_table=settings.price_table,
                model=settings.llm_model,
            ),
        )


async def _load(conn: AsyncConnection[Any], due: list[dict[str, Any]]) -> list[ThreadRecord]:
    ids = [row["thread_id"] for row in due]
    codes: dict[str, list[str]] = defaultdict(list)
    for row in await (await conn.execute(_ERRORS, (ids,))).fetchall():
        if row["code"]:
            codes[row["run_id"]].append(row["code"])
    runs: dict[str, list[RunRecord]] = defaultdict(list)
    for row in await (await conn.execute(_RUNS, (ids,))).fetchall():
        runs[row["thread_id"]].append(
            RunRecord(
                run_id=row["run_id"],
                status=row["status"],
                result=row["result"],
                created_at=row["created_at"],
                finished_at=row["finished_at"],
                error_codes=tuple(codes.get(row["run_id"], ())),
                ttft_ms=row["ttft_ms"],
            )
        )
    writes: dict[str, list[WriteRecord]] = defaultdict(list)
    for row in await (await conn.execute(_WRITES, (ids,))).fetchall():
        writes[row["thread_id"]].append(WriteRecord(row["tool_name"], bool(row["ok"])))
    control = {r["thread_id"]: r for r in await (await conn.execute(_CONTROL, (ids,))).fetchall()}
    threads = []
    for row in due:
        lease = control.get(row["thread_id"]) or {}
        handoffs = [t for t in (lease.get("handoff_at"), lease.get("ticket_at")) if t]
        threads.append(
            ThreadRecord(
                thread_id=row["thread_id"],
                user_id=row["user_id"],
                created_at=row["created_at"],
                activity_at=row["activity_at"],
                control=lease.get("control") or "agent",
                handoff_reason=lease.get("control_reason"),
                handoff_at=min(handoffs) if handoffs else None,
                runs=tuple(runs.get(row["thread_id"], ())),
                writes=tuple(writes.get(row["thread_id"], ())),
            )
        )
    return threads


def _row(outcome: Outcome) -> dict[str, Any]:
    row = asdict(outcome)
    for column in _JSON_COLUMNS:
        row[column] = Jsonb(row[column])
    return row


async def _batch(conn: AsyncConnection[Any], policy: SweepPolicy, after: str) -> list[str] | None:
    """One batch in the caller's transaction: the threads it looked at (a full batch means
    there may be more), or None while another sweep holds the lock."""
    cur = await conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS ok", (OUTCOMES_LOCK_KEY,))
    row = await cur.fetchone()
    if not row or not row["ok"]:
        return None
    params = {
        "after": after,
        "idle_s": policy.idle_s,
        "running_s": max(policy.idle_s, RUNNING_GRACE_S),
        "limit": policy.batch_size,
    }
    due = await (await conn.execute(_DUE, params)).fetchall()
    if not due:
        return []
    await _store(conn, [compute(thread, policy.rules) for thread in await _load(conn, due)])
    return [r["thread_id"] for r in due]


async def _store(conn: AsyncConnection[Any], outcomes: list[Outcome]) -> None:
    async with conn.cursor() as cur:
        await cur.executemany(_UPSERT, [_row(o) for o in outcomes])


async def keep_outcomes(conn: AsyncConnection[Any], thread_ids: list[str], rules: Rules) -> int:
    """The outcomes of threads about to be deleted (DELETE /threads, retention, erase),
    computed and stored now, in the caller's transaction, whether they are idle yet or not:
    once the runs are gone, there is nothing left to compute them from."""
    due = await (await conn.execute(_NAMED, (thread_ids,))).fetchall()
    if not due:
        return 0
    await _store(conn, [compute(thread, rules) for thread in await _load(conn, due)])
    return len(due)


def outcome_keeper(settings: Settings) -> KeepOutcomes:
    """`keep_outcomes` with the settings' rules, for the delete paths of the layers below."""
    return partial(keep_outcomes, rules=SweepPolicy.from_settings(settings).rules)


@dataclass(frozen=True)
class Swept:
    outcomes: int = 0
    batches: int = 0


async def sweep(pool: AsyncConnectionPool[Any], policy: SweepPolicy) -> Swept | None:
    """Compute every due conversation's outcome, `policy.batch_size` threads per transaction.
    None when another sweep held the lock at the start; one that finds it taken between two
    batches stops there (the rest stays due)."""
    after, total, batches = "", 0, 0
    while True:
        async with pool.connection() as conn, conn.transaction():
            done = await _batch(conn, policy, after)
        if done is None:
            return Swept(total, batches) if batches else None
        batches += 1
        total += len(done)
        if len(done) < policy.batch_size:
            return Swept(total, batches)
        after = done[-1]
