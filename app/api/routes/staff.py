"""The takeover routes: staff see the queue and every customer's threads in it, accept or take
over a conversation, answer in it, transfer it, and hand it back. Anyone else gets 404, as
for a missing thread; the thread's own stream (`/events`) serves the customer too."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from pydantic import BaseModel, Field
from sse_starlette.sse import EventSourceResponse

from app.api.auth import bearer_token
from app.api.cursors import StaffCursor, cursor_of, position_of
from app.api.deps import CurrentUser, ServicesDep, ThreadId, signed_in
from app.api.routes.common import JSON_ERRORS, require_json
from app.api.schemas import Line, Text
from app.api.sse import NO_BUFFERING
from app.channels.relay import relay_staff_message
from app.errors import AppError, thread_not_found
from app.identity import STAFF_ROLES, Principal
from app.runs.stream import sse_frame
from app.threads.ids import InvalidThreadId, thread_id

router = APIRouter(tags=["staff"], responses=JSON_ERRORS)

MAX_CONTENT_CHARS = 8000


async def current_staff(
    request: Request, services: ServicesDep, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    principal = await signed_in(request, services, lambda: bearer_token(authorization))
    if principal.role not in STAFF_ROLES:
        raise thread_not_found()  # a staff route does not exist for anyone else
    return principal


Staff = Annotated[Principal, Depends(current_staff)]


async def current_admin(staff: Annotated[Principal, Depends(current_staff)]) -> Principal:
    """Staff who may change what the agent is told (issue 42); other staff get 403."""
    if staff.role != "admin":
        raise AppError("only an admin may do this", code="admin_only", status_code=403)
    return staff


Admin = Annotated[Principal, Depends(current_admin)]


def _thread(value: str) -> str:
    user, _, session = value.partition(":")
    try:
        return thread_id(user, session)
    except InvalidThreadId:
        raise thread_not_found() from None


FullThreadId = Annotated[str, Path(description="the full thread id, `user_id:session_id`")]


class ControlIn(BaseModel):
    action: Literal["accept", "take_over", "transfer", "release"]
    version: int = Field(ge=0)
    to: str | None = Field(default=None, pattern=r"^staff-[A-Za-z0-9_.@-]{1,122}$")
    note: Text | None = Field(default=None, max_length=4000)


class StaffMessageIn(BaseModel):
    content: Text = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    client_message_id: Line | None = Field(default=None, max_length=128)


def _after(cursor: str | None) -> tuple[datetime, str] | None:
    return position_of(cursor) if cursor else None


@router.get("/staff/threads", summary="Threads waiting for a person or held by one")
async def queue(
    staff: Staff,
    services: ServicesDep,
    control: Literal["queued", "mine", "human", "all"] = "queued",
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: StaffCursor = None,
) -> dict[str, Any]:
    rows = await services.controls.queue(control, staff, limit, _after(cursor))
    now = datetime.now().astimezone()
    items = [
        {
            "thread_id": r["thread_id"],
            "customer": r["user_id"],
            "session_id": r["session_id"],
            "title": r["title"],
            "state": r["control"],
            "version": r["control_version"],
            "assignee": r["assignee"],
            "assignee_name": r["assignee_name"],
            "summary": r["control_summary"],
            "reason": r["control_reason"],
            "since": r["control_since"].isoformat(),
            "waiting_s": max(0.0, (now - r["control_since"]).total_seconds()),
            "last_message": r["last_message"],
            "channel": r["channel"],  # chatwoot | email | None (the chat page)
            "channel_link": r["channel_link"],
        }
        for r in rows
    ]
    last = rows[-1] if len(rows) == limit else None
    return {
        "items": items,
        "next_cursor": cursor_of(last["control_since"], last["thread_id"]) if last else None,
    }


@router.get("/staff/threads/{thread_id}", summary="A thread's transcript and control history")
async def staff_thread(thread_id: FullThreadId, staff: Staff, services: ServicesDep) -> Any:
    thread = _thread(thread_id)
    row = await services.inspector.require_thread(thread)
    state = await services.inspector.state(
        thread, row["session_id"], "customer", row["user_id"], None
    )
    controls = services.controls
    return {
        **state,
        "thread_id": thread,
        "customer": row["user_id"],
        "control": await controls.get(thread),
        "control_history": await controls.history(thread),
    }


@router.get("/staff/threads/{thread_id}/control", summary="Who answers the thread")
async def staff_control(thread_id: FullThreadId, staff: Staff, services: ServicesDep) -> Any:
    thread = _thread(thread_id)
    await services.inspector.require_thread(thread)
    return await services.controls.get(thread)


@router.get("/threads/{session_id}/control", summary="Who answers the caller's thread")
async def customer_control(thread: ThreadId, user: CurrentUser, services: ServicesDep) -> Any:
    await services.inspector.require_thread(thread.id)
    return await services.controls.get(thread.id)


@router.post(
    "/staff/threads/{thread_id}/control",
    dependencies=[Depends(require_json)],
    summary="Accept, take over, transfer or release a thread (compare-and-set on version)",
)
async def change_control(
    thread_id: FullThreadId, body: ControlIn, staff: Staff, services: ServicesDep
) -> dict[str, Any]:
    thread = _thread(thread_id)
    await services.inspector.require_thread(thread)
    if body.action == "transfer" and body.to is None:
        raise AppError("a transfer names the staff member it goes to", code="transfer_to_required")
    return await services.controls.change(
        thread, body.action, body.version, staff, to=body.to, note=body.note
    )


@router.post(
    "/staff/threads/{thread_id}/messages",
    dependencies=[Depends(require_json)],
    summary="A message from the person holding the thread",
)
async def staff_message(
    thread_id: FullThreadId, body: StaffMessageIn, staff: Staff, services: ServicesDep
) -> dict[str, Any]:
    thread = _thread(thread_id)
    await services.inspector.require_thread(thread)
    view = await services.controls.staff_says(thread, staff, body.content, body.client_message_id)
    if services.channels is not None:  # a Chatwoot or email thread: to the customer there
        await relay_staff_message(services.channels, thread, view)
    return view


def _last_event_id(value: str | None) -> int:
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0


async def _thread_events(services: Any, thread: str, after: int) -> AsyncIterator[bytes]:
    """Everything new on the thread, from the process's one poller (app/threads/feed.py)."""
    async for row in services.feed.follow(thread, after):
        yield feed_frame(row)


def feed_frame(row: dict[str, Any]) -> bytes:
    """A row of the thread's feed on the wire; its data as `json.dumps` writes it (ASCII)."""
    return sse_frame(row["kind"], json.dumps(row["data"]).encode(), row["id"])


def _events_response(services: Any, thread: str, last_event_id: str | None) -> EventSourceResponse:
    events = _thread_events(services, thread, _last_event_id(last_event_id))
    ping = max(1, int(services.settings.sse_heartbeat_s))
    return EventSourceResponse(events, ping=ping, headers=NO_BUFFERING)


@router.get(
    "/staff/threads/{thread_id}/events",
    summary="The thread's stream, for the console",
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def staff_events(
    thread_id: FullThreadId,
    staff: Staff,
    services: ServicesDep,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    thread = _thread(thread_id)
    await services.inspector.require_thread(thread)
    return _events_response(services, thread, last_event_id)


@router.get(
    "/threads/{session_id}/events",
    summary="The thread's stream, for the customer",
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def customer_events(
    thread: ThreadId,
    user: CurrentUser,
    services: ServicesDep,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    await services.inspector.require_thread(thread.id)
    return _events_response(services, thread.id, last_event_id)
