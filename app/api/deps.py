"""Typed access to what the lifespan built, the request's identity, and its thread."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any

from fastapi import Depends, Header, Request, params
from langgraph.store.base import BaseStore
from psycopg_pool import AsyncConnectionPool

from app.actions.catalog import Actions
from app.api.auth import VerifiedTokens, bearer_token
from app.api.ratelimit import RateLimiter
from app.channels.service import Channels
from app.config import Settings
from app.errors import Unauthorized
from app.identity import Principal
from app.metrics import Metrics
from app.policies.ports import PolicyTests
from app.runs.logs import RunLogFeed
from app.runs.repository import RunRepository
from app.runs.service import RunService
from app.threads.control import Controls
from app.threads.feed import ThreadFeed
from app.threads.ids import SESSION_ID_RE, thread_id
from app.threads.inspect import ThreadInspector


@dataclass
class Services:
    settings: Settings
    pool: AsyncConnectionPool[Any]
    runs: RunService
    inspector: ThreadInspector
    controls: Controls
    repo: RunRepository
    store: BaseStore
    metrics: Metrics
    feed: ThreadFeed  # the threads' own streams, one poller for the process
    logs: RunLogFeed  # stored run logs (other replicas' runs), one poller for the process
    model_label: str  # "demo" or the configured model name
    actions: Actions | None = None  # the actions file's sources (app/actions), when set
    policy_tester: PolicyTests | None = None  # the policy gate's tests (issue 42)
    channels: Channels | None = None  # Chatwoot and email (docs/channels.md)

    @cached_property
    def limiter(self) -> RateLimiter:
        # Built on first use from what the lifespan opened; it holds no connection of its own.
        return RateLimiter(self.pool, self.settings, self.metrics)

    @cached_property
    def tokens(self) -> VerifiedTokens:
        return VerifiedTokens(self.settings.jwt_secret.get_secret_value())


# Dependencies are `async def` although they never await: FastAPI runs a plain `def`
# dependency in a worker thread, a thread hop per request for a dict lookup and an HMAC.
async def get_services(request: Request) -> Services:
    return services_of(request)


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _client_key(request: Request, services: Services) -> str:
    peer = request.client.host if request.client else None
    return services.limiter.client_key(peer, request.headers.get("x-forwarded-for"))


async def signed_in(
    request: Request, services: Services, read_token: Callable[[], str]
) -> Principal:
    """The principal of the token `read_token` finds in the request (it raises Unauthorized
    for a missing or malformed one). The one place a token becomes a principal, for the
    native routes and the LangGraph ones alike."""
    try:
        return services.tokens.verify(read_token())
    except Unauthorized:
        # Failed sign-ins count per client IP; past the limit the answer is 429, not 401.
        await services.limiter.check("auth", _client_key(request, services))
        raise


async def current_user(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    # Services are taken from the request, not as a sub-dependency: each dependency FastAPI
    # resolves costs ~25 us a request, and every turn's route resolves this one.
    return await signed_in(request, services_of(request), lambda: bearer_token(authorization))


async def limit_public(
    request: Request, services: Annotated[Services, Depends(get_services)]
) -> None:
    """The public routes (the help centre), per client IP."""
    await services.limiter.check("public", _client_key(request, services))


async def limit_sign_in(
    request: Request, services: Annotated[Services, Depends(get_services)]
) -> None:
    """Demo sign-ins mint identities: counted with failed sign-ins, per client IP."""
    await services.limiter.check("auth", _client_key(request, services))


async def limit_thread_creation(
    user: Annotated[Principal, Depends(current_user)],
    services: Annotated[Services, Depends(get_services)],
) -> None:
    await services.limiter.check("threads", user.user_id)


ServicesDep = Annotated[Services, Depends(get_services)]
CurrentUser = Annotated[Principal, Depends(current_user)]


def session_id_path(description: str) -> params.Path:
    """A path parameter that names a thread by its session id, checked before any route."""
    return params.Path(
        min_length=1, max_length=64, pattern=SESSION_ID_RE.pattern, description=description
    )


SessionId = Annotated[
    str, session_id_path("The thread's session id: 1-64 characters of A-Z a-z 0-9 _ -")
]


@dataclass(frozen=True)
class ThreadRef:
    """The caller's thread named by the path: the checkpointer's thread id
    (`{user_id}:{session_id}`, built on the server) and the session id the client sent."""

    id: str
    session_id: str

    @classmethod
    def of(cls, user: Principal, session_id: str) -> ThreadRef:
        """The caller's own thread: another user's same session id is another thread."""
        return cls(id=thread_id(user.user_id, session_id), session_id=session_id)


async def caller_thread(session_id: SessionId, user: CurrentUser) -> ThreadRef:
    return ThreadRef.of(user, session_id)


ThreadId = Annotated[ThreadRef, Depends(caller_thread)]
