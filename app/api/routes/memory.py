"""What the service remembers about the signed-in customer, and forgetting it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response

from app.api.deps import CurrentUser, ServicesDep
from app.api.routes.common import JSON_ERRORS
from app.api.schemas import PreferenceOut
from app.errors import NotFound
from app.memory.store import KEY_RE, forget, list_preferences

router = APIRouter(tags=["memory"], responses=JSON_ERRORS)
KeyPath = Annotated[str, Path(pattern=KEY_RE.pattern)]


@router.get("/me/memory", response_model=list[PreferenceOut])
async def my_memory(user: CurrentUser, services: ServicesDep) -> list[dict[str, Any]]:
    # A guest's own subject never has memory; a guest's conversation writes to the customer
    # it verified as, whose memory that customer reads with their own token.
    if user.role != "customer":
        return []
    prefs = await list_preferences(services.store, user.user_id)
    return [{"key": p.key, "value": p.value, "updated_at": p.updated_at} for p in prefs]


@router.delete("/me/memory/{key}", status_code=204)
async def forget_preference(key: KeyPath, user: CurrentUser, services: ServicesDep) -> Response:
    if user.role != "customer" or not await forget(services.store, user.user_id, key):
        raise NotFound("no remembered preference with that key", code="preference_not_found")
    return Response(status_code=204)
