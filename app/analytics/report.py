"""What the analytics API and `cs-agent report` read: summaries by period and the list of
conversations, from `conversation_outcomes` only (never a transcript).

Rates are fractions of all conversations of the period, abandoned and failed ones included;
`tool_error_rate` is the share of conversations with at least one failed tool call. A
conversation belongs to the period it started in (UTC).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from psycopg_pool import AsyncConnectionPool

Group = Literal["day", "week"]
RESULTS = ("resolved", "handed_off", "abandoned", "failed")
FLAG_CODES = (
    "repeated_tool_error",
    "guard_ended_turn",
    "declined_write",
    "customer_repeated",
    "asked_for_human",
    "late_handoff",
    "failed_run",
    "policy_refusal",
    "slow_answer",
)

_MEASURES = """count(*) AS conversations,
        count(*) FILTER (WHERE result = 'resolved') AS resolved,
        count(*) FILTER (WHERE result = 'handed_off') AS handed_off,
        count(*) FILTER (WHERE result = 'abandoned') AS abandoned,
        count(*) FILTER (WHERE result = 'failed') AS failed,
        count(*) FILTER (WHERE tool_errors > 0) AS with_tool_errors,
        coalesce(sum(cost_usd), 0)::float8 AS cost_usd,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_p50_ms) AS ttft_p50_ms,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_p50_ms) AS ttft_p95_ms"""
_IN_RANGE = "started_at >= %(from)s AND started_at < %(to)s"
_PERIODS = f"""SELECT date_trunc(%(group)s, started_at, 'UTC') AS start, {_MEASURES}
    FROM conversation_outcomes WHERE {_IN_RANGE} GROUP BY 1 ORDER BY 1"""
_TOTALS = f"SELECT {_MEASURES} FROM conversation_outcomes WHERE {_IN_RANGE}"
_LIST = """SELECT thread_id, result, handoff_reason, flags, score, score_reasons, turns,
        tool_calls, tool_errors, tokens_in, tokens_out, cost_usd::float8 AS cost_usd,
        started_at, ended_at
    FROM conversation_outcomes
    WHERE (%(flag)s::text IS NULL
           OR flags @> jsonb_build_array(jsonb_build_object('code', %(flag)s::text)))
      AND (%(result)s::text IS NULL OR result = %(result)s)
      AND (%(max_score)s::int IS NULL OR score <= %(max_score)s)
      AND (%(after_ended)s::timestamptz IS NULL
           OR (ended_at, thread_id) < (%(after_ended)s, %(after_thread)s))
    ORDER BY ended_at DESC, thread_id DESC LIMIT %(limit)s"""


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def _measures(row: dict[str, Any]) -> dict[str, Any]:
    n = int(row["conversations"])
    return {
        "conversations": n,
        "resolved": int(row["resolved"]),
        "handed_off": int(row["handed_off"]),
        "abandoned": int(row["abandoned"]),
        "failed": int(row["failed"]),
        "resolution_rate": _rate(int(row["resolved"]), n),
        "handoff_rate": _rate(int(row["handed_off"]), n),
        "tool_error_rate": _rate(int(row["with_tool_errors"]), n),
        "cost_usd": round(float(row["cost_usd"]), 6),
        "ttft_p50_ms": row["ttft_p50_ms"],
        "ttft_p95_ms": row["ttft_p95_ms"],
    }


async def summary(
    pool: AsyncConnectionPool[Any], start: datetime, end: datetime, group: Group
) -> dict[str, Any]:
    params = {"from": start, "to": end, "group": group}
    async with pool.connection() as conn:
        periods = await (await conn.execute(_PERIODS, params)).fetchall()
        totals = await (await conn.execute(_TOTALS, params)).fetchone()
    assert totals is not None
    return {
        "periods": [{"start": r["start"].isoformat(), **_measures(r)} for r in periods],
        "totals": _measures(totals),
    }


async def conversations(
    pool: AsyncConnectionPool[Any],
    *,
    flag: str | None,
    result: str | None,
    max_score: int | None,
    after: tuple[datetime, str] | None,
    limit: int,
) -> tuple[list[dict[str, Any]], tuple[datetime, str] | None]:
    """A page of outcomes, newest ended first, and the position after it (None: the end)."""
    params = {
        "flag": flag,
        "result": result,
        "max_score": max_score,
        "after_ended": after[0] if after else None,
        "after_thread": after[1] if after else None,
        "limit": limit,
    }
    async with pool.connection() as conn:
        rows = await (await conn.execute(_LIST, params)).fetchall()
    items = [
        {
            **row,
            "started_at": row["started_at"].isoformat(),
            "ended_at": row["ended_at"].isoformat(),
        }
        for row in rows
    ]
    last = rows[-1] if len(rows) == limit else None
    return items, (last["ended_at"], last["thread_id"]) if last else None
