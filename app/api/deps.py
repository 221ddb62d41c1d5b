"""Typed access to what the lifespan built, and the request's identity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Header, Path, Request
from langgraph.store.base import BaseStore
from psycopg_pool import AsyncConnectionPool

from app.agent.threads import SESSION_ID_RE
from app.api.auth import Principal, bearer_token, verify_token
from app.config import Settings
from app.metrics import Metrics
from app.runs.inspect import ThreadInspector
from app.runs.repository import RunRepository
from app.runs.service import RunService


@dataclass
class Services:
    settings: Settings
    pool: AsyncConnectionPool[Any]
    runs: RunService
    inspector: ThreadInspector
    repo: RunRepository
    store: BaseStore
    metrics: Metrics
    model_label: str  # "demo" or the configured model name


# Dependencies are `async def` although they never await: FastAPI runs a plain `def`
# dependency in a worker thread, a thread hop per request for a dict lookup and an HMAC.
async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def current_user(
    services: Annotated[Services, Depends(get_services)],
    authorization: Annotated[str | None, Header()] = None,
) -> Principal:
    token = bearer_token(authorization)
    return verify_token(services.settings.jwt_secret.get_secret_value(), token)


ServicesDep = Annotated[Services, Depends(get_services)]
CurrentUser = Annotated[Principal, Depends(current_user)]
SessionId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        pattern=SESSION_ID_RE.pattern,
        description="The thread's session id: 1-64 characters of A-Z a-z 0-9 _ -",
    ),
]
