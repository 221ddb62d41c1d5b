"""What the service remembers about the signed-in customer, and forgetting it. In dev, also
the messages a caller's conversations sent (the page shows a guest its code from there)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel

from app.api.deps import CurrentUser, ServicesDep
from app.api.routes.common import JSON_ERRORS
from app.errors import NotFound
from app.memory.store import KEY_RE, forget, list_preferences
from app.notify.outbox import recent_messages

router = APIRouter(tags=["memory"], responses=JSON_ERRORS)
KeyPath = Annotated[str, Path(pattern=KEY_RE.pattern)]


class MemoryEntryOut(BaseModel):
    key: str
    value: str
    updated_at: str  # when it was stored
    thread_id: str | None = None  # the conversation that stored it ("{subject}:{session}")
    verified_by: str | None = None  # how the customer was proven there: "token" or "code"


class OutboxMessageOut(BaseModel):
    session_id: str | None  # the caller's conversation that sent it
    recipient: str
    subject: str
    body: str
    created_at: datetime


@router.get("/me/memory", response_model=list[MemoryEntryOut])
async def my_memory(user: CurrentUser, services: ServicesDep) -> list[dict[str, Any]]:
    # A guest's own subject never has memory; a guest's conversation writes, once the guest
    # proved with a code to be a customer, to that customer's memory, which the customer
    # reads here with their own token (each entry names the conversation that stored it).
    if user.role != "customer":
        return []
    prefs = await list_preferences(services.store, user.user_id)
    return [
        {
            "key": p.key,
            "value": p.value,
            "updated_at": p.updated_at,
            "thread_id": p.thread_id,
            "verified_by": p.verified_by,
        }
        for p in prefs
    ]


@router.delete("/me/memory/{key}", status_code=204)
async def forget_preference(key: KeyPath, user: CurrentUser, services: ServicesDep) -> Response:
    if user.role != "customer" or not await forget(services.store, user.user_id, key):
        raise NotFound("no remembered preference with that key", code="preference_not_found")
    return Response(status_code=204)


@router.get("/me/outbox", response_model=list[OutboxMessageOut], include_in_schema=False)
async def my_outbox(user: CurrentUser, services: ServicesDep) -> list[dict[str, Any]]:
    """APP_ENV=dev only: the newest messages the caller's conversations sent, so the demo
    page can show a guest the code that would have gone by email."""
    if services.settings.app_env != "dev":
        raise NotFound("not found")
    messages = await recent_messages(services.pool, user.user_id)
    for message in messages:
        thread_id = message.pop("thread_id", None) or ""
        message["session_id"] = thread_id.partition(":")[2] or None
    return messages
