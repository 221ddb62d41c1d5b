"""What the analytics API and `cs-agent report` read: summaries by period and the list of
conversations, from `conversation_outcomes` only (never a transcript).

Rates are fractions of all conversations of the period, abandoned and failed ones included;
`tool_error_rate` is the share of conversations with at least one failed tool call, and
`tools` gives each tool's calls, failed calls and `error_rate` (failed / calls). Time to
first token is the percentile over every run of the period that streamed a token. A
conversation (and its runs) belongs to the period it started in (UTC).
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
        coalesce(sum(cost_usd), 0)::float8 AS cost_usd"""
_IN_RANGE = """started_at >= %(from)s AND started_at < %(to)s
    AND (%(policy_version)s::int IS NULL OR policy_version = %(policy_version)s)"""
_START = "date_trunc(%(group)s, started_at, 'UTC')"
_PERIODS = f"""SELECT {_START} AS start, {_MEASURES}
    FROM conversation_outcomes WHERE {_IN_RANGE} GROUP BY 1 ORDER BY 1"""
_TOTALS = f"SELECT {_MEASURES} FROM conversation_outcomes WHERE {_IN_RANGE}"
# By period and over the whole range (the row whose period is NULL).
_TTFT = f"""SELECT {_START} AS start,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY v) AS ttft_p50_ms,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY v) AS ttft_p95_ms
    FROM conversation_outcomes CROSS JOIN LATERAL unnest(ttft_runs_ms) AS v
    WHERE {_IN_RANGE} GROUP BY GROUPING SETS (({_START}), ())"""
_TOOLS = f"""SELECT {_START} AS start, c.key AS tool, sum(c.value::int)::int AS calls,
        sum(coalesce((tool_errors_by_tool ->> c.key)::int, 0))::int AS errors
    FROM conversation_outcomes CROSS JOIN LATERAL jsonb_each_text(tool_calls_by_tool) AS c
    WHERE {_IN_RANGE} GROUP BY 1, 2 ORDER BY 1, 2"""
# By policy version (issue 42), judge scores included.
_VERSIONS = f"""SELECT policy_version, {_MEASURES},
        avg(score)::float8 AS score_avg, count(score) AS scored
    FROM conversation_outcomes WHERE {_IN_RANGE} GROUP BY 1 ORDER BY 1"""
# Conversations by channel (NULL: the chat page), over the whole range (docs/channels.md).
_CHANNELS = f"""SELECT coalesce(channel, 'web') AS channel, count(*)::int AS conversations,
        count(*) FILTER (WHERE result = 'resolved')::int AS resolved,
        count(*) FILTER (WHERE result = 'handed_off')::int AS handed_off
    FROM conversation_outcomes WHERE {_IN_RANGE} GROUP BY 1 ORDER BY 1"""
_LIST = """SELECT thread_id, coalesce(channel, 'web') AS channel, result, handoff_reason, flags,
        score, score_reasons, turns,
        tool_calls, tool_errors, tokens_in, tokens_out, cost_usd::float8 AS cost_usd,
        started_at, ended_at, policy_version
    FROM conversation_outcomes
    WHERE (%(policy_version)s::int IS NULL OR policy_version = %(policy_version)s)
      AND (%(flag)s::text IS NULL
           OR flags @> jsonb_build_array(jsonb_build_object('code', %(flag)s::text)))
      AND (%(flagged)s::bool IS NULL OR (jsonb_array_length(flags) > 0) = %(flagged)s)
      AND (%(result)s::text IS NULL OR result = %(result)s)
      AND (%(max_score)s::int IS NULL OR score <= %(max_score)s)
      AND (%(from)s::timestamptz IS NULL OR started_at >= %(from)s)
      AND (%(to)s::timestamptz IS NULL OR started_at < %(to)s)
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
        "ttft_p50_ms": None,
        "ttft_p95_ms": None,
        "tools": {},
    }


def _ms(value: float | None) -> float | None:
    return None if value is None else round(float(value), 1)


def _add_tool(tools: dict[str, dict[str, Any]], name: str, calls: int, errors: int) -> None:
    tool = tools.setdefault(name, {"calls": 0, "errors": 0})
    tool["calls"] += calls
    tool["errors"] += errors
    tool["error_rate"] = _rate(tool["errors"], tool["calls"])


async def summary(
    pool: AsyncConnectionPool[Any],
    start: datetime,
    end: datetime,
    group: Group,
    *,
    policy_version: int | None = None,
    by_version: bool = False,
) -> dict[str, Any]:
    """`policy_version`: only that version's conversations; `by_version`: also each
    version's measures and mean judge score (`policy_versions`)."""
    params = {"from": start, "to": end, "group": group, "policy_version": policy_version}
    # Never prepared: the pools run prepared statements on their generic plan
    # (app/db/pool.py), which cannot know whether a range is a day or a year. A report is
    # asked for now and then; planning it for its own range costs nothing that matters.
    async with pool.connection() as conn:
        periods = await (await conn.execute(_PERIODS, params, prepare=False)).fetchall()
        totals = await (await conn.execute(_TOTALS, params, prepare=False)).fetchone()
        ttft = await (await conn.execute(_TTFT, params, prepare=False)).fetchall()
        tools = await (await conn.execute(_TOOLS, params, prepare=False)).fetchall()
        versions = []
        if by_version:
            versions = await (await conn.execute(_VERSIONS, params, prepare=False)).fetchall()
        channels = await (await conn.execute(_CHANNELS, params, prepare=False)).fetchall()
    assert totals is not None
    by_start = {r["start"]: {"start": r["start"].isoformat(), **_measures(r)} for r in periods}
    whole = _measures(totals)
    for row in ttft:
        into = whole if row["start"] is None else by_start[row["start"]]
        into["ttft_p50_ms"], into["ttft_p95_ms"] = _ms(row["ttft_p50_ms"]), _ms(row["ttft_p95_ms"])
    for row in tools:
        _add_tool(by_start[row["start"]]["tools"], row["tool"], row["calls"], row["errors"])
        _add_tool(whole["tools"], row["tool"], row["calls"], row["errors"])
    by_channel = {r.pop("channel"): r for r in (dict(c) for c in channels)}
    got: dict[str, Any] = {
        "periods": list(by_start.values()),
        "totals": whole,
        "channels": by_channel,
    }
    if by_version:
        got["policy_versions"] = [_version_measures(r) for r in versions]
    return got


def _version_measures(row: dict[str, Any]) -> dict[str, Any]:
    measures = _measures(row)
    del measures["ttft_p50_ms"], measures["ttft_p95_ms"], measures["tools"]
    score = row["score_avg"]
    return {
        "policy_version": row["policy_version"],
        **measures,
        "score_avg": None if score is None else round(float(score), 3),
        "scored": int(row["scored"]),
    }


async def conversations(
    pool: AsyncConnectionPool[Any],
    *,
    flag: str | None,
    flagged: bool | None = None,
    result: str | None,
    max_score: int | None,
    after: tuple[datetime, str] | None,
    limit: int,
    start: datetime | None = None,
    end: datetime | None = None,
    policy_version: int | None = None,
) -> tuple[list[dict[str, Any]], tuple[datetime, str] | None]:
    """A page of outcomes, newest ended first, and the position after it (None: the end).
    `start`/`end`: conversations that started in [start, end), as the summary counts them."""
    params = {
        "policy_version": policy_version,
        "flag": flag,
        "flagged": flagged,
        "result": result,
        "max_score": max_score,
        "from": start,
        "to": end,
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
