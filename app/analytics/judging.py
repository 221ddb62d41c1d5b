"""The judging step: after a sweep, a sample of the stored outcomes is scored by the judge.

Apart from the sweep on purpose: a model call takes seconds, and the sweep's batches hold
its advisory lock and a transaction. Here each outcome is claimed in a statement of its
own (a lease on the row, FOR UPDATE SKIP LOCKED, so two replicas judge different ones), the
model is called with no transaction open, and the score is stored only if the outcome was
not recomputed meanwhile (same `activity_at`); a newer outcome is due for judging again.

The sample is chosen by thread id (an md5 fraction below `QA_SAMPLE_RATE`), so every
replica and every sweep agree on it. A judge that fails or answers garbage leaves the
outcome unscored and is tried again at a later sweep, `JUDGE_ATTEMPTS` times in all.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.analytics.judge import Judge, JudgeFailed, Verdict, transcript_of
from app.analytics.outcome import cost_of
from app.config import Settings

log = structlog.get_logger(__name__)

JUDGE_ATTEMPTS = 3
RETRY_AFTER_S = 600.0  # a failed attempt waits this long (the next sweeps) before another
# A sampled thread id: the first 32 bits of its md5, as a fraction of 2^32. Python's
# `sampled()` computes the same.
SAMPLE_SQL = "(('x' || substr(md5(thread_id), 1, 8))::bit(32)::bigint / 4294967296.0)"

_CLAIM = f"""UPDATE conversation_outcomes o
    SET judge_lease_until = now() + make_interval(secs => %(lease_s)s)
    WHERE o.thread_id = (
        SELECT thread_id FROM conversation_outcomes
        WHERE judged_at IS NULL AND judge_attempts < %(attempts)s
          AND (judge_lease_until IS NULL OR judge_lease_until < now())
          AND {SAMPLE_SQL} < %(rate)s
        ORDER BY ended_at DESC LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING o.thread_id, o.activity_at"""
_RUNS = "SELECT result FROM runs WHERE thread_id = %s ORDER BY created_at, run_id"
_SCORED = """UPDATE conversation_outcomes SET score = %(score)s, score_reasons = %(reasons)s,
        judged_at = now(), judge_model = %(model)s,
        judge_tokens_in = coalesce(judge_tokens_in, 0) + %(tokens_in)s,
        judge_tokens_out = coalesce(judge_tokens_out, 0) + %(tokens_out)s,
        judge_cost_usd = coalesce(judge_cost_usd, 0) + %(cost_usd)s,
        judge_attempts = judge_attempts + 1, judge_error = NULL, judge_lease_until = NULL
    WHERE thread_id = %(thread_id)s AND activity_at = %(activity_at)s"""
_UNSCORED = """UPDATE conversation_outcomes SET judge_model = %(model)s,
        judge_tokens_in = coalesce(judge_tokens_in, 0) + %(tokens_in)s,
        judge_tokens_out = coalesce(judge_tokens_out, 0) + %(tokens_out)s,
        judge_cost_usd = coalesce(judge_cost_usd, 0) + %(cost_usd)s,
        judge_attempts = least(judge_attempts + %(spent)s, %(attempts)s),
        judge_error = %(error)s,
        judge_lease_until = now() + make_interval(secs => %(retry_s)s)
    WHERE thread_id = %(thread_id)s AND activity_at = %(activity_at)s"""


def sampled(thread_id: str, rate: float) -> bool:
    """Whether `thread_id` is in a sample of `rate`, as the claim's SQL decides it."""
    return int(hashlib.md5(thread_id.encode()).hexdigest()[:8], 16) / 2**32 < rate


@dataclass(frozen=True)
class Judged:
    scored: int = 0
    unscored: int = 0


async def _claim(
    pool: AsyncConnectionPool[Any], rate: float, lease_s: float
) -> tuple[str, datetime] | None:
    params = {"lease_s": lease_s, "attempts": JUDGE_ATTEMPTS, "rate": rate}
    async with pool.connection() as conn:
        row = await (await conn.execute(_CLAIM, params)).fetchone()
    return (row["thread_id"], row["activity_at"]) if row else None


async def _transcript(pool: AsyncConnectionPool[Any], thread_id: str) -> str:
    async with pool.connection() as conn:
        rows = await (await conn.execute(_RUNS, (thread_id,))).fetchall()
    return transcript_of(row["result"] for row in rows)


async def _store(pool: AsyncConnectionPool[Any], statement: str, params: dict[str, Any]) -> None:
    async with pool.connection() as conn:
        await conn.execute(statement, params)


def _scored(verdict: Verdict) -> dict[str, Any]:
    return {
        "score": verdict.score,
        "reasons": Jsonb(verdict.reasons),
        "tokens_in": verdict.tokens_in,
        "tokens_out": verdict.tokens_out,
        "cost_usd": verdict.cost_usd,
    }


def _unscored(judge: Judge, failed: JudgeFailed, *, spent: int) -> dict[str, Any]:
    """`spent`: the attempts this failure uses up (all of them when nothing can be read)."""
    return {
        "error": failed.code,
        "tokens_in": failed.tokens_in,
        "tokens_out": failed.tokens_out,
        "cost_usd": cost_of(judge.rules, failed.tokens_in, failed.tokens_out),
        "spent": spent,
        "attempts": JUDGE_ATTEMPTS,
        "retry_s": RETRY_AFTER_S,
    }


async def judge_due(
    pool: AsyncConnectionPool[Any], judge: Judge, *, rate: float, limit: int
) -> Judged:
    """Score up to `limit` sampled, unjudged outcomes, one at a time."""
    scored = unscored = 0
    lease_s = judge.deadline_s + 30.0
    for _ in range(limit):
        claimed = await _claim(pool, rate, lease_s)
        if claimed is None:
            break
        thread_id, activity_at = claimed
        key = {"thread_id": thread_id, "activity_at": activity_at, "model": judge.rules.model}
        transcript = await _transcript(pool, thread_id)
        if not transcript:  # its thread was deleted before it was judged: nothing to read
            gone = JudgeFailed("no_transcript")
            await _store(pool, _UNSCORED, {**key, **_unscored(judge, gone, spent=JUDGE_ATTEMPTS)})
            unscored += 1
            continue
        try:
            verdict = await judge.review(transcript)
        except JudgeFailed as failed:
            log.warning("judge left a conversation unscored", thread_id=thread_id, why=failed.code)
            await _store(pool, _UNSCORED, {**key, **_unscored(judge, failed, spent=1)})
            unscored += 1
            continue
        await _store(pool, _SCORED, {**key, **_scored(verdict)})
        scored += 1
    return Judged(scored, unscored)


async def judge_after_sweep(pool: AsyncConnectionPool[Any], settings: Settings) -> Judged | None:
    """The judging step as the sweeper and `cs-agent outcomes refresh` run it; None while
    the judge is off (no `QA_JUDGE_MODEL`, or a sample rate of 0)."""
    if settings.qa_judge_model is None or settings.qa_sample_rate <= 0:
        return None
    async with Judge.open(settings) as judge:
        return await judge_due(
            pool, judge, rate=settings.qa_sample_rate, limit=settings.qa_judge_batch_size
        )
