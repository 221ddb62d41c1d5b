"""Operator analytics for staff (issue 29): summaries by day or week, and the conversations
with their outcome and flags, each opening as `/staff/threads/{thread_id}`. Anyone else gets
404, as for every staff route. Reads `conversation_outcomes` only (app/analytics/report.py)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BeforeValidator

from app.analytics.report import conversations, summary
from app.api.cursors import StaffCursor, cursor_of
from app.api.deps import ServicesDep
from app.api.routes.common import JSON_ERRORS
from app.api.routes.staff import Staff
from app.api.routes.staff import _after as position_after  # the queue's cursor, same shape

router = APIRouter(tags=["analytics"], responses=JSON_ERRORS)

DEFAULT_RANGE = timedelta(days=30)
FlagCode = Literal[
    "repeated_tool_error",
    "guard_ended_turn",
    "declined_write",
    "customer_repeated",
    "asked_for_human",
    "late_handoff",
    "failed_run",
    "policy_refusal",
    "slow_answer",
]
Result = Literal["resolved", "handed_off", "abandoned", "failed"]


# RFC 3339, as the document's `format: date-time` says: a number (`to=0.5`, which pydantic
# reads as seconds since the epoch) or a date-time without an offset is refused.
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _rfc3339(value: object) -> object:
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError("must be an RFC 3339 date-time with an offset, e.g. 2026-11-01T00:00:00Z")
    return value


Instant = Annotated[datetime, BeforeValidator(_rfc3339)]


@router.get("/staff/analytics/summary", summary="Conversations by result, rates and cost")
async def analytics_summary(
    staff: Staff,
    services: ServicesDep,
    start: Annotated[Instant | None, Query(alias="from")] = None,
    end: Annotated[Instant | None, Query(alias="to")] = None,
    group: Literal["day", "week"] = "day",
    policy_version: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    by: Literal["policy_version"] | None = None,
) -> dict[str, Any]:
    """Conversations that started in [from, to) (default: the last 30 days), by UTC day or
    ISO week. Rates are fractions of all of the period's conversations. `from` and `to`
    are RFC 3339 date-times with an offset (`2026-11-01T00:00:00Z`); a period whose `from`
    is not before its `to` holds no conversations. A conversation is counted once its
    outcome is computed: after `idle_min` quiet minutes (a handed-off one at once), by a
    sweep every `sweep_every_s` seconds (0: only `outcomes refresh`)."""
    end = end or datetime.now(UTC)
    start = start or end - DEFAULT_RANGE
    settings = services.settings
    counted = await summary(
        services.pool,
        start,
        max(start, end),
        group,
        policy_version=policy_version,
        by_version=by == "policy_version",
    )
    return {
        **counted,
        "idle_min": settings.conversation_idle_min,
        "sweep_every_s": settings.outcomes_sweep_every_s,
    }


@router.get("/staff/analytics/conversations", summary="Conversations with outcome and flags")
async def analytics_conversations(
    staff: Staff,
    services: ServicesDep,
    flag: FlagCode | None = None,
    flagged: bool | None = None,
    result: Result | None = None,
    max_score: Annotated[int | None, Query(ge=1, le=5)] = None,
    cursor: StaffCursor = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    start: Annotated[Instant | None, Query(alias="from")] = None,
    end: Annotated[Instant | None, Query(alias="to")] = None,
    policy_version: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
) -> dict[str, Any]:
    """Newest ended first; each item's transcript is `/staff/threads/{thread_id}`.
    `flagged=true` keeps those with any flag, `false` those with none. `from`/`to` (RFC
    3339 with an offset) keep the conversations that started in [from, to), the range the
    summary counts; a `from` not before `to` keeps none."""
    items, last = await conversations(
        services.pool,
        flag=flag,
        flagged=flagged,
        result=result,
        max_score=max_score,
        after=position_after(cursor),
        limit=limit,
        start=start,
        end=end,
        policy_version=policy_version,
    )
    return {"items": items, "next_cursor": cursor_of(*last) if last else None}
