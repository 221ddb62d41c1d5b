"""Threads: create, list, inspect, rewind, delete. Every id is scoped to the caller."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Response

from app.api.cursors import ThreadsCursor, cursor_of, position_of
from app.api.deps import CurrentUser, ServicesDep, ThreadId, limit_thread_creation
from app.api.routes.common import JSON_ERRORS, require_json
from app.api.schemas import (
    HistoryPage,
    Line,
    RewindIn,
    ThreadCreated,
    ThreadItem,
    ThreadPage,
    ThreadState,
)
from app.db.erase import forget_thread
from app.policies.store import thread_policy
from app.threads.ids import thread_id

router = APIRouter(tags=["threads"], responses=JSON_ERRORS)


@router.post(
    "/threads",
    status_code=201,
    response_model=ThreadCreated,
    dependencies=[Depends(limit_thread_creation)],
)
async def create_thread(user: CurrentUser, services: ServicesDep) -> dict[str, Any]:
    session_id = uuid.uuid4().hex
    created = await services.repo.create_thread(
        thread_id(user.user_id, session_id), user.user_id, session_id
    )
    return {"id": session_id, "created_at": created}


@router.get("/threads", response_model=ThreadPage)
async def list_threads(
    user: CurrentUser,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: ThreadsCursor = None,
) -> dict[str, Any]:
    after = position_of(cursor) if cursor else None
    rows = await services.repo.list_threads(user.user_id, limit + 1, after)
    items = [
        ThreadItem(
            id=r["session_id"],
            title=r["title"],
            created_at=r["created_at"],
            updated_at=r["updated_at"],
            message_count=r["message_count"],
        )
        for r in rows[:limit]
    ]
    next_cursor = (
        cursor_of(rows[limit - 1]["updated_at"], rows[limit - 1]["session_id"])
        if len(rows) > limit
        else None
    )
    return {"items": items, "next_cursor": next_cursor}


@router.get("/threads/{session_id}/state", response_model=ThreadState)
async def get_state(
    thread: ThreadId,
    user: CurrentUser,
    services: ServicesDep,
    checkpoint_id: Annotated[Line | None, Query(max_length=64)] = None,
    view: Annotated[Literal["transcript", "working"], Query()] = "transcript",
) -> dict[str, Any]:
    """`view=transcript` (default): every message the person saw, including those folded
    into the summary; `view=working`: only the messages the agent still works with."""
    state = await services.inspector.state(
        thread.id,
        thread.session_id,
        user.role,
        user.user_id,
        checkpoint_id,
        working=view == "working",
    )
    return {
        **state,
        "control": await services.controls.get(thread.id),
        "policy_version": await thread_policy(services.pool, thread.id),
    }


@router.get("/threads/{session_id}/history", response_model=HistoryPage)
async def get_history(
    thread: ThreadId,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[Line | None, Query(max_length=64)] = None,
) -> dict[str, Any]:
    return await services.inspector.history(thread.id, limit, before)


@router.post(
    "/threads/{session_id}/rewind",
    response_model=ThreadState,
    dependencies=[Depends(require_json)],
)
async def rewind(
    thread: ThreadId, body: RewindIn, user: CurrentUser, services: ServicesDep
) -> dict[str, Any]:
    return await services.inspector.rewind(
        thread.id,
        thread.session_id,
        user.role,
        user.user_id,
        checkpoint_id=body.checkpoint_id,
        message_id=body.message_id,
    )


@router.delete("/threads/{session_id}", status_code=204)
async def delete_thread(thread: ThreadId, services: ServicesDep) -> Response:
    await forget_thread(services.pool, thread.id, services.inspector.delete)
    return Response(status_code=204)
