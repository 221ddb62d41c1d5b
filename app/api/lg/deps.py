"""The caller and the caller's thread, as the LangGraph SDKs name them.

The SDKs send the token as `X-Api-Key` (what Agent Chat UI and `get_client(api_key=...)`
do) or, with custom headers, as `Authorization: Bearer`. Either is the same HS256 JWT as
the native API's, checked by the same `signed_in`; the thread id in the path is the session
id, scoped to the caller as on the native routes (`ThreadRef.of`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from app.api.auth import bearer_token
from app.api.deps import ServicesDep, ThreadRef, session_id_path, signed_in
from app.errors import thread_not_found
from app.identity import Principal


def sdk_token(authorization: str | None, x_api_key: str | None) -> str:
    """`Authorization: Bearer` when sent (or when no key is), else the `X-Api-Key`."""
    if authorization or not (x_api_key and x_api_key.strip()):
        return bearer_token(authorization)
    return x_api_key.strip()


async def lg_user(
    request: Request,
    services: ServicesDep,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header(alias="x-api-key")] = None,
) -> Principal:
    return await signed_in(request, services, lambda: sdk_token(authorization, x_api_key))


LgUser = Annotated[Principal, Depends(lg_user)]
LgThreadIdPath = Annotated[
    str, session_id_path("The thread id: cs-agent's session id (a UUID for threads made here)")
]


async def lg_thread(thread_id: LgThreadIdPath, user: LgUser) -> ThreadRef:
    return ThreadRef.of(user, thread_id)


LgThread = Annotated[ThreadRef, Depends(lg_thread)]


async def existing_thread(thread: LgThread, services: ServicesDep) -> ThreadRef:
    """The caller's thread, which must exist: a missing one and another customer's are
    the same 404."""
    if await services.repo.thread(thread.id) is None:
        raise thread_not_found()
    return thread


ExistingThread = Annotated[ThreadRef, Depends(existing_thread)]


async def limit_thread_creation(user: LgUser, services: ServicesDep) -> None:
    await services.limiter.check("threads", user.user_id)
