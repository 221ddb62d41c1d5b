"""The caller and the caller's thread, as the LangGraph SDKs name them.

The SDKs send the token as `X-Api-Key` (what Agent Chat UI and `get_client(api_key=...)`
do) or, with custom headers, as `Authorization: Bearer`. Either is the same HS256 JWT as
the native API's; the thread id in the path is the session id, scoped to the caller.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Path, Request

from app.api.auth import bearer_token, verify_token
from app.api.deps import ServicesDep, ThreadRef
from app.errors import Unauthorized, thread_not_found
from app.identity import Principal
from app.runs.threads import SESSION_ID_RE
from app.runs.threads import thread_id as checkpointer_thread_id


async def lg_user(
    request: Request,
    services: ServicesDep,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header(alias="x-api-key")] = None,
) -> Principal:
    try:
        if authorization or not (x_api_key and x_api_key.strip()):
            token = bearer_token(authorization)
        else:
            token = x_api_key.strip()
        return verify_token(services.settings.jwt_secret.get_secret_value(), token)
    except Unauthorized:
        # Failed sign-ins count per client IP, as on the native routes.
        peer = request.client.host if request.client else None
        key = services.limiter.client_key(peer, request.headers.get("x-forwarded-for"))
        await services.limiter.check("auth", key)
        raise


LgUser = Annotated[Principal, Depends(lg_user)]
LgThreadIdPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        pattern=SESSION_ID_RE.pattern,
        description="The thread id: cs-agent's session id (a UUID for threads made here)",
    ),
]


async def lg_thread(thread_id: LgThreadIdPath, user: LgUser) -> ThreadRef:
    return ThreadRef(id=checkpointer_thread_id(user.user_id, thread_id), session_id=thread_id)


LgThread = Annotated[ThreadRef, Depends(lg_thread)]


async def existing_thread(thread: LgThread, services: ServicesDep) -> ThreadRef:
    """The caller's thread, which must exist: a missing one and another customer's are
    the same 404."""
    if await services.repo.thread(thread.id) is None:
        raise thread_not_found()
    return thread


ExistingThread = Annotated[ThreadRef, Depends(existing_thread)]


async def limit_posts(user: LgUser, services: ServicesDep) -> None:
    await services.limiter.check_post(user.user_id)


async def limit_thread_creation(user: LgUser, services: ServicesDep) -> None:
    await services.limiter.check("threads", user.user_id)
