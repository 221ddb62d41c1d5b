"""Posting a message and resuming a paused run: SSE or JSON, by the Accept header."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from app.api.deps import CurrentUser, SessionId, ThreadRef, services_of
from app.api.routes.common import JSON_ERRORS, require_json
from app.api.routes.runs import run_location
from app.api.schemas import MessageIn, ResumeIn, TurnResult
from app.api.sse import all_at_once, replay, sse_response
from app.config import Settings
from app.errors import thread_not_found
from app.runs.run import Run

router = APIRouter(tags=["messages"], dependencies=[Depends(require_json)])


def wants_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "")


async def _respond(
    request: Request, outcome: Run | dict[str, Any], session_id: str, settings: Settings
) -> Response:
    """The run's events as SSE, or its result as JSON; `Content-Location` names the run, so
    a client that loses the stream can follow it again (GET its `/stream`) or cancel it."""
    heartbeat_s = settings.sse_heartbeat_s
    if isinstance(outcome, dict):  # an earlier turn's recorded result
        run_id = str(outcome.get("run_id") or uuid.uuid4())
        headers = {"Content-Location": run_location(session_id, run_id)}
        if wants_stream(request):
            events = replay(outcome, session_id, run_id)
            response: Response = sse_response(all_at_once(events), heartbeat_s)
            response.headers.update(headers)
            return response
        return JSONResponse(outcome, headers=headers)
    headers = {"Content-Location": run_location(session_id, outcome.run_id)}
    if wants_stream(request):
        response = sse_response(outcome.follow(frame_s=settings.sse_frame_ms / 1000), heartbeat_s)
        response.headers.update(headers)
        return response
    await outcome.finished.wait()
    return JSONResponse(outcome.result, headers=headers)


@router.post(
    "/threads/{session_id}/messages",
    response_model=TurnResult,
    responses={**JSON_ERRORS, 200: {"content": {"text/event-stream": {}}}},
    summary="Post a user message; the answer streams as SSE or returns as JSON",
)
async def post_message(
    request: Request, session_id: SessionId, body: MessageIn, user: CurrentUser
) -> Response:
    # The thread and the services are built here rather than by dependencies (ThreadId,
    # ServicesDep): FastAPI's resolution of each costs ~25 us, on the route every turn takes.
    thread = ThreadRef.of(user, session_id)
    services = services_of(request)
    with services.runs.admission.admit():  # before any connection (app/runs/admission.py)
        outcome = await services.runs.post_message(
            user, thread.id, thread.session_id, body.content, body.client_message_id
        )
    return await _respond(request, outcome, thread.session_id, services.settings)


@router.post(
    "/threads/{session_id}/resume",
    response_model=TurnResult,
    responses={**JSON_ERRORS, 200: {"content": {"text/event-stream": {}}}},
    summary="Approve or reject the writes a paused run is waiting on",
)
async def resume(
    request: Request, session_id: SessionId, body: ResumeIn, user: CurrentUser
) -> Response:
    thread = ThreadRef.of(user, session_id)
    services = services_of(request)
    with services.runs.admission.admit():
        if await services.repo.thread(thread.id) is None:
            raise thread_not_found()
        run = await services.runs.resume(user, thread.id, thread.session_id, body.decision)
    return await _respond(request, run, thread.session_id, services.settings)
