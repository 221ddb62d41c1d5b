"""Retention: idle threads expire, and an old thread's history shrinks to its turn boundaries.

- A thread idle for `THREAD_TTL_DAYS` (no turn, no run started) is deleted as DELETE
  /threads deletes one: its checkpoints, writes and blobs, runs (and their log chunks),
  transcript archive and index row go, its write records lose their personal fields, and
  its lease row stays (a generation never starts again at 1).
- `HISTORY_KEEP_DAYS` after its last turn, a thread keeps its transcript and, of its
  checkpoints, the last one of each turn: every checkpoint the graph stopped at rather
  than went on from (the parent of the next turn's `input` checkpoint, the head, a turn
  waiting for a confirmation, the end of a branch a rewind left), with their pending writes
  (the interrupt of a turn waiting for a yes) and the blobs they reference. A kept
  checkpoint's parent becomes its nearest kept ancestor, so history walks and forks (a
  rewind copies a checkpoint under its parent) still work.

langgraph-checkpoint-postgres's `aprune(strategy="keep_latest")` keeps only the head and
leaves it without a parent, so no earlier turn could be rewound to, and it prunes in a
transaction of its own, which our lease claim cannot share. Its statements are right for
the parts that are the same (the whole-thread delete, the DeltaChannel refusal, freeing
blobs no kept checkpoint references) and are used here; what to keep and the re-parenting
are ours.

Every batch is one transaction that first takes `pg_try_advisory_xact_lock` (one sweep at
a time, across replicas, and behind PgBouncer in transaction mode), then claims each thread
with `cs_claim_thread` as a run would: a thread with a live lease is skipped, and a run
that lost its claim meanwhile can commit nothing. The claim is released in the same
transaction, leaving `owner = 'retention'` on the lease row: until another claim (a run, a
rewind) takes it, nothing has been written to the thread, so it needs no second prune.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any, Literal

from langgraph.checkpoint.postgres.base import (
    PRUNE_BLOBS_SQL,
    PRUNE_DELETE_THREADS_SQL,
    PRUNE_DELTA_THREADS_SQL,
    PRUNE_REFERENCED_BLOBS_SQL,
    PRUNE_WRITES_SQL,
)
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.db import lock_keys
from app.db.erase import KeepOutcomes, redact_thread_records
from app.db.thread_tables import OUR_TABLES, delete_statements

RETENTION_LOCK_KEY = lock_keys.RETENTION
RETENTION_OWNER = "retention"
CLAIM_TTL_MS = 60_000
DAY_S = 86_400.0

Phase = Literal["expire", "prune"]

# Idle since the cutoff: no turn (threads.updated_at) and no run started (a run that died
# before it ended never touched updated_at).
_IDLE = """t.updated_at < {cutoff} AND NOT EXISTS (
    SELECT 1 FROM runs r WHERE r.thread_id = t.thread_id AND r.created_at >= {cutoff})"""
_CLOCK = "coalesce(%(now)s::timestamptz, now())"
_TTL_CUTOFF = f"({_CLOCK} - make_interval(secs => %(ttl_s)s))"
_KEEP_CUTOFF = f"({_CLOCK} - make_interval(secs => %(keep_s)s))"

_EXPIRED = f"""SELECT t.thread_id FROM threads t
    WHERE t.thread_id > %(after)s AND {_IDLE.format(cutoff=_TTL_CUTOFF)}
    ORDER BY t.thread_id LIMIT %(limit)s"""
# Threads past the history window, not pruned since their last claim, not expiring.
_TO_PRUNE = f"""SELECT t.thread_id FROM threads t
    LEFT JOIN thread_leases l ON l.thread_id = t.thread_id
    WHERE t.thread_id > %(after)s AND {_IDLE.format(cutoff=_KEEP_CUTOFF)}
      AND l.owner IS DISTINCT FROM '{RETENTION_OWNER}'
      AND (%(ttl_s)s::float8 IS NULL OR NOT ({_IDLE.format(cutoff=_TTL_CUTOFF)}))
    ORDER BY t.thread_id LIMIT %(limit)s"""
_CLAIM = f"""SELECT c.thread_id FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS c(thread_id, n),
    LATERAL cs_claim_thread(c.thread_id, '{RETENTION_OWNER}', %(run)s, %(ttl_ms)s) AS claim
    WHERE claim.generation IS NOT NULL ORDER BY c.n"""
_RELEASE = """UPDATE thread_leases SET run_id = NULL, expires_at = clock_timestamp()
    WHERE run_id = %(run)s"""
_HISTORY = """SELECT checkpoint_id, parent_checkpoint_id, metadata->>'source' AS source,
        (metadata->>'step')::int AS step
    FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = ''"""
# As the library's PRUNE_CHECKPOINTS_SQL, but by the ids planned (not "all but the kept").
_DROP_CHECKPOINTS = """WITH deleted AS (
        DELETE FROM checkpoints
        WHERE thread_id = %s AND checkpoint_ns = '' AND checkpoint_id = ANY(%s)
        RETURNING checkpoint -> 'channel_versions' AS versions
    )
    SELECT DISTINCT v.key AS channel, v.value AS version
    FROM deleted CROSS JOIN LATERAL jsonb_each_text(deleted.versions) AS v"""
_REPARENT = """UPDATE checkpoints c SET parent_checkpoint_id = p.parent
    FROM unnest(%s::text[], %s::text[]) AS p(checkpoint_id, parent)
    WHERE c.thread_id = %s AND c.checkpoint_ns = '' AND c.checkpoint_id = p.checkpoint_id"""
# What DELETE /threads removes (app/db/thread_tables.py), after the checkpointer's tables.
_DELETE_OURS = delete_statements(sql.SQL("thread_id = ANY(%s)"), OUR_TABLES)
# The count of a table's rows deleted, as `Swept` names it (None: not counted).
_COUNTED = {
    "run_event_chunks": "run_event_chunks",
    "transcript_archive": "transcript_messages",
    "runs": "runs",
    "threads": "threads_deleted",
}


@dataclass(frozen=True)
class Policy:
    """None turns a rule off."""

    thread_ttl_days: float | None = 90.0
    history_keep_days: float | None = 7.0
    batch_size: int = 20

    @classmethod
    def from_settings(cls, settings: Settings) -> Policy:
        return cls(
            thread_ttl_days=settings.thread_ttl_days,
            history_keep_days=settings.history_keep_days,
            batch_size=settings.retention_batch_size,
        )

    @property
    def active(self) -> bool:
        return self.thread_ttl_days is not None or self.history_keep_days is not None


@dataclass(frozen=True)
class Swept:
    threads_deleted: int = 0
    threads_pruned: int = 0
    threads_busy: int = 0  # a live lease: skipped this time
    checkpoints: int = 0
    checkpoint_writes: int = 0
    checkpoint_blobs: int = 0
    runs: int = 0
    run_event_chunks: int = 0
    transcript_messages: int = 0

    def __add__(self, other: Swept) -> Swept:
        return Swept(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def summary(self) -> str:
        return ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in asdict(self).items())


@dataclass(frozen=True)
class HistoryPlan:
    kept: list[str]
    dropped: list[str]
    reparent: dict[str, str | None]  # kept checkpoint -> its new parent


def plan_history(rows: Iterable[tuple[str, str | None, str | None, int | None]]) -> HistoryPlan:
    """What stays of a thread's root checkpoints, given (id, parent id, metadata source,
    step): every checkpoint the graph did not go on from within a turn, each re-parented
    to its nearest kept ancestor.

    The graph goes on from a checkpoint with a `loop` (or `update`: a cancel's close, a
    rewind's `__end__`) child one step later. What it did not go on from is where a turn
    ended: the parent of the next turn's `input`, the head, a turn left waiting for a
    confirmation, the end of a branch a rewind left. A re-parented child is at least two
    steps on (every checkpoint adds one), so a pruned history is kept whole by the next
    prune."""
    parent: dict[str, str | None] = {}
    went_on: set[str] = set()
    nodes = list(rows)
    step = {checkpoint_id: s for checkpoint_id, _, _, s in nodes}
    for checkpoint_id, parent_id, source, s in nodes:
        parent[checkpoint_id] = parent_id
        if parent_id is None or source not in ("loop", "update"):
            continue
        before = step.get(parent_id)
        if s is not None and before is not None and s == before + 1:
            went_on.add(parent_id)
    kept = parent.keys() - went_on
    reparent: dict[str, str | None] = {}
    for checkpoint_id in kept:
        ancestor = parent[checkpoint_id]
        # Ids grow with time, so a walk up ends; a parent that is gone ends it too.
        while ancestor is not None and ancestor in parent and ancestor not in kept:
            ancestor = parent[ancestor]
        if ancestor is not None and ancestor not in parent:
            ancestor = None
        if ancestor != parent[checkpoint_id]:
            reparent[checkpoint_id] = ancestor
    return HistoryPlan(kept=sorted(kept), dropped=sorted(parent.keys() - kept), reparent=reparent)


async def _rowcount(
    conn: AsyncConnection[Any], query: str | sql.Composed, params: Sequence[Any]
) -> int:
    cur = await conn.execute(query, params, prepare=False)
    return max(cur.rowcount, 0)


async def _expire(conn: AsyncConnection[Any], thread_ids: list[str]) -> Swept:
    """Delete the claimed threads' conversations (what DELETE /threads removes)."""
    counts: dict[str, int] = {}
    checkpoints, blobs, writes = PRUNE_DELETE_THREADS_SQL  # library's `aprune(..., "delete")`
    counts["checkpoints"] = await _rowcount(conn, checkpoints, (thread_ids,))
    counts["checkpoint_blobs"] = await _rowcount(conn, blobs, (thread_ids,))
    counts["checkpoint_writes"] = await _rowcount(conn, writes, (thread_ids,))
    for table, statement in _DELETE_OURS:
        deleted = await _rowcount(conn, statement, (thread_ids,))
        if table in _COUNTED:
            counts[_COUNTED[table]] = deleted
    return Swept(**counts)


async def _prune(conn: AsyncConnection[Any], thread_id: str) -> Swept:
    """Keep one checkpoint per turn of one claimed thread (see `plan_history`)."""
    cur = await conn.execute(_HISTORY, (thread_id,))
    rows = [
        (r["checkpoint_id"], r["parent_checkpoint_id"], r["source"], r["step"])
        for r in await cur.fetchall()
    ]
    plan = plan_history(rows)
    if not plan.dropped:
        return Swept()
    writes = await _rowcount(conn, PRUNE_WRITES_SQL, (thread_id, "", plan.dropped))
    cur = await conn.execute(_DROP_CHECKPOINTS, (thread_id, plan.dropped), prepare=False)
    freed = {(r["channel"], r["version"]) for r in await cur.fetchall()}
    if plan.reparent:
        ids = list(plan.reparent)
        await conn.execute(_REPARENT, (ids, [plan.reparent[i] for i in ids], thread_id))
    cur = await conn.execute(PRUNE_REFERENCED_BLOBS_SQL, (thread_id, ""), prepare=False)
    referenced = {(r["channel"], r["version"]) for r in await cur.fetchall()}
    garbage: dict[str, list[str]] = defaultdict(list)
    for channel, version in freed - referenced:
        garbage[channel].append(version)
    blobs = 0
    for channel, versions in sorted(garbage.items()):
        blobs += await _rowcount(conn, PRUNE_BLOBS_SQL, (thread_id, "", channel, versions))
    return Swept(
        threads_pruned=1,
        checkpoints=len(plan.dropped),
        checkpoint_writes=writes,
        checkpoint_blobs=blobs,
    )


async def _batch(
    conn: AsyncConnection[Any],
    policy: Policy,
    phase: Phase,
    after: str,
    now: datetime | None,
    keep: KeepOutcomes | None,
) -> tuple[Swept, list[str], list[str]] | None:
    """One batch, in the caller's transaction: (counts, candidates, threads deleted), or
    None while another sweep holds the lock."""
    cur = await conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS ok", (RETENTION_LOCK_KEY,))
    row = await cur.fetchone()
    if not row or not row["ok"]:
        return None
    await conn.execute("SET LOCAL lock_timeout = '5s'")
    params: dict[str, Any] = {
        "after": after,
        "limit": policy.batch_size,
        "now": now,
        "ttl_s": None if policy.thread_ttl_days is None else policy.thread_ttl_days * DAY_S,
        "keep_s": None if policy.history_keep_days is None else policy.history_keep_days * DAY_S,
    }
    cur = await conn.execute(_EXPIRED if phase == "expire" else _TO_PRUNE, params)
    candidates = [r["thread_id"] for r in await cur.fetchall()]
    if not candidates:
        return Swept(), [], []
    claim = {"ids": candidates, "run": f"retention-{uuid.uuid4()}", "ttl_ms": CLAIM_TTL_MS}
    cur = await conn.execute(_CLAIM, claim)
    claimed = [r["thread_id"] for r in await cur.fetchall()]
    swept = Swept(threads_busy=len(candidates) - len(claimed))
    deleted: list[str] = []
    if phase == "expire" and claimed:
        if keep is not None:  # their outcomes outlive them
            await keep(conn, claimed)
        swept += await _expire(conn, claimed)
        deleted = claimed
    elif claimed:
        cur = await conn.execute(PRUNE_DELTA_THREADS_SQL, (claimed, claimed), prepare=False)
        delta = {r["thread_id"] for r in await cur.fetchall()}  # not ours to rebuild: skipped
        for thread_id in claimed:
            if thread_id not in delta:
                swept += await _prune(conn, thread_id)
    await conn.execute(_RELEASE, claim)
    return swept, candidates, deleted


async def sweep(
    pool: AsyncConnectionPool[Any],
    policy: Policy,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    keep: KeepOutcomes | None = None,
) -> Swept | None:
    """Expire idle threads, then prune old histories, in batches of `policy.batch_size`
    threads, each batch one transaction (rolled back when `dry_run`: the counts are what a
    sweep would do). None when another sweep held the lock at the start; a sweep that finds
    it taken between two batches stops there. `now` replaces the database's clock (the
    benchmark's simulated year). `keep` stores an expiring thread's outcome before it goes."""
    total = Swept()
    started = False
    phases: list[Phase] = []
    if policy.thread_ttl_days is not None:
        phases.append("expire")
    if policy.history_keep_days is not None:
        phases.append("prune")
    for phase in phases:
        after = ""
        while True:
            async with pool.connection() as conn, conn.transaction(force_rollback=dry_run):
                result = await _batch(conn, policy, phase, after, now, keep)
            if result is None:
                return total if started else None
            started = True
            swept, candidates, deleted = result
            total += swept
            if not dry_run:
                for thread_id in deleted:  # as DELETE /threads: after the conversation
                    await redact_thread_records(pool, thread_id)
            if len(candidates) < policy.batch_size:
                break
            after = candidates[-1]
    return total
