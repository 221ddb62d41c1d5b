"""Runs you can come back to: list, inspect, follow (join) and cancel, on any replica."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query
from fastapi.responses import JSONResponse, Response

from app.api.deps import ServicesDep, ThreadId
from app.api.routes.common import JSON_ERRORS
from app.api.sse import sse_response
from app.errors import NotFound, thread_not_found
from app.runs.stream import STREAM_SCHEMA

router = APIRouter(tags=["runs"], responses=JSON_ERRORS)

RunIdPath = Annotated[
    str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$", description="A run id")
]


def run_location(session_id: str, run_id: str) -> str:
    return f"/threads/{session_id}/runs/{run_id}"


def _view(row: dict[str, Any]) -> dict[str, Any]:
    started: datetime = row["created_at"]
    finished: datetime | None = row["finished_at"]
    return {
        "run_id": row["run_id"],
        "status": row["status"],
        "created_at": started.isoformat(),
        "finished_at": finished.isoformat() if finished else None,
        "duration_s": (finished - started).total_seconds() if finished else None,
        "ttft_ms": row.get("ttft_ms"),  # to the answer's first token; null: none streamed
        "checkpoint_id": row["checkpoint_id"],
        "usage": row["usage"],
        "policy_version": row.get("policy_version"),  # the rules it answered with (issue 42)
    }


async def _require_thread(services: ServicesDep, thread: ThreadId) -> None:
    if await services.repo.thread(thread.id) is None:
        raise thread_not_found()


@router.get("/threads/{session_id}/runs", summary="The thread's recent runs, newest first")
async def list_runs(
    thread: ThreadId,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, Any]:
    await _require_thread(services, thread)
    return {"items": [_view(r) for r in await services.repo.list_runs(thread.id, limit)]}


@router.get("/threads/{session_id}/runs/{run_id}", summary="A run's status, timings and usage")
async def get_run(thread: ThreadId, run_id: RunIdPath, services: ServicesDep) -> dict[str, Any]:
    row = await services.repo.run(thread.id, run_id)
    if row is None:
        raise NotFound("run not found", code="run_not_found")
    return _view(row)


@router.get(
    "/threads/{session_id}/runs/{run_id}/stream",
    summary="Follow a run: replay its events after Last-Event-ID (or ?after=N), then tail it",
    responses={200: {"content": {"text/event-stream": {"schema": STREAM_SCHEMA}}}},
)
async def follow_run(
    thread: ThreadId,
    run_id: RunIdPath,
    services: ServicesDep,
    after: Annotated[int | None, Query(ge=0)] = None,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> Response:
    """Works on any replica: a run of this process is followed in memory, any other from
    the log its owner stores. The stream ends with `done`; a finished run's replays and
    closes at once."""
    start = after if after is not None else _event_id(last_event_id)
    run = services.runs.live(run_id)
    heartbeat_s = services.settings.sse_heartbeat_s
    if run is not None and run.thread_id == thread.id:
        frame_s = services.settings.sse_frame_ms / 1000
        return sse_response(run.follow(start, frame_s), heartbeat_s)
    if await services.repo.run(thread.id, run_id) is None:
        raise NotFound("run not found", code="run_not_found")
    return sse_response(services.logs.follow(thread.id, run_id, start), heartbeat_s)


@router.post(
    "/threads/{session_id}/runs/{run_id}/cancel",
    status_code=202,
    summary="Stop a run (at its next step; a write under way finishes first)",
)
async def cancel_run(thread: ThreadId, run_id: RunIdPath, services: ServicesDep) -> Response:
    await services.runs.cancel(thread.id, run_id)
    return JSONResponse(
        {"run_id": run_id, "status": "cancelling"},
        status_code=202,
        headers={"Location": run_location(thread.session_id, run_id)},
    )


def _event_id(header: str | None) -> int:
    if header is None or not header.strip():
        return 0
    try:
        return max(0, int(header.strip()))
    except ValueError:
        return 0
