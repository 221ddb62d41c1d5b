"""One error hierarchy, rendered by one handler as `{"error": {"code", "message"}}`."""

from __future__ import annotations

from typing import Any

import psycopg
import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout, TooManyRequests
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.retry import retried

log = structlog.get_logger(__name__)


class AppError(Exception):
    status_code = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, status_code: int | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        if status_code:
            self.status_code = status_code
        self.headers: dict[str, str] = {}
        self.details: dict[str, Any] = {}  # more fields of the error object, for clients


class NotFound(AppError):
    status_code = 404
    code = "not_found"


class Unauthorized(AppError):
    status_code = 401
    code = "unauthorized"

    def __init__(self, message: str = "a valid bearer token is required") -> None:
        super().__init__(message)
        self.headers = {"WWW-Authenticate": "Bearer"}


class Conflict(AppError):
    status_code = 409
    code = "conflict"


class ThreadBusy(Conflict):
    """409: another run holds the thread. `Retry-After` is when its lease expires if it is
    not renewed; a reply whose server died holds it for at most `window_s` (the lease's
    time to live), a live one until it ends."""

    code = "thread_busy"

    def __init__(self, *, retry_after_s: int = 1, window_s: int | None = None) -> None:
        message = "another reply is in progress on this thread; try again when it ends"
        if window_s is not None:
            message += f" (a reply whose server stopped frees it within {window_s} s)"
        super().__init__(message)
        self.retry_after_s = max(1, retry_after_s)
        self.headers = {"Retry-After": str(self.retry_after_s)}
        self.details = {"retry_after_s": self.retry_after_s}
        if window_s is not None:
            self.details["lease_ttl_s"] = window_s


class RateLimited(AppError):
    """429: a rate limit or a budget is spent; `Retry-After` says when to try again."""

    status_code = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: int, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = max(1, retry_after_s)
        self.headers = {"Retry-After": str(self.retry_after_s)}


def error_body(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **details}}


def thread_not_found() -> NotFound:
    # One message for "missing" and "someone else's": existence must never leak.
    return NotFound("thread not found", code="thread_not_found")


# A database blip (a restart, terminated backends, no pooled connection within
# DB_POOL_TIMEOUT_S): retrying is the remedy, so 503 with Retry-After, never 500.
DATABASE_RETRY_AFTER_S = 2
DATABASE_UNAVAILABLE = "the database is unavailable right now; please retry in a few seconds"

CONNECTION_LOST = "cs_agent.db_connection_lost"  # set in the request's scope["state"]


def connection_lost(exc: psycopg.OperationalError) -> bool:
    """The connection died under a statement (not: no connection to be had, a timeout)."""
    if isinstance(exc, PoolTimeout | TooManyRequests):
        return False
    return exc.sqlstate is None or exc.sqlstate.startswith(("08", "57P"))


# A terminate of every backend can kill the connection a retry got too (the pool's check and
# the kill race): two more tries, each on a connection checked after the last one died.
READ_TRIES = 3


class RetryLostReads:
    """A GET or HEAD whose database connection died under it runs again (up to READ_TRIES
    in all): a read has no effect to repeat, and the pool has checked its idle connections
    by then (app/db/pool.py). Innermost of the middleware, so the client, the logs and the
    request id see one request.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return

        async def attempt(n: int) -> None:
            body = receive if n == 1 else _empty_body(receive)
            if await self._try(scope, body, send, may_retry=n < READ_TRIES):
                raise _Lost

        def retrying(_: BaseException) -> None:
            log.info("read retried after a lost database connection", path=scope.get("path"))

        await retried(
            attempt,
            tries=READ_TRIES,
            retryable=lambda error: isinstance(error, _Lost),
            on_retry=retrying,
        )

    async def _try(self, scope: Scope, receive: Receive, send: Send, *, may_retry: bool) -> bool:
        """One try; True when its connection died and nothing of it reached the client."""
        retry = False

        async def held_back(message: Message) -> None:
            nonlocal retry
            if message["type"] == "http.response.start":
                lost = bool(scope.get("state", {}).pop(CONNECTION_LOST, False))
                retry = lost and may_retry
            if not retry:
                await send(message)

        await self.app(scope, receive, held_back)
        return retry


class _Lost(Exception):
    """A try whose connection died, held back from the client: it may run again."""


def _empty_body(receive: Receive) -> Receive:
    """The (empty) body of a GET again: the first try consumed it."""
    replayed = False

    async def receive_again() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": b"", "more_body": False}
        return await receive()

    return receive_again


# Field errors that are their own typed code rather than `validation_error` (the type a
# validator raises as a PydanticCustomError): a client can tell them apart.
CLIENT_JSON_INVALID = "client_json_invalid"  # app/api/clientjson.py
STORE_FILTER_INVALID = "store_filter_invalid"  # app/api/lg/store_filter.py
TYPED_FIELD_ERRORS = frozenset({CLIENT_JSON_INVALID, STORE_FILTER_INVALID})

STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def install_error_handlers(app: FastAPI) -> None:
    app.add_middleware(RetryLostReads)  # added first: the innermost middleware

    @app.exception_handler(AppError)
    async def _app_error(request: Request, exc: AppError) -> JSONResponse:
        if isinstance(exc, ThreadBusy):  # counted here: posts, resumes, rewinds and deletes
            services = getattr(request.app.state, "services", None)
            if services is not None:
                services.metrics.add("cs_agent_thread_busy_total")
        return JSONResponse(
            error_body(exc.code, exc.message, **exc.details),
            status_code=exc.status_code,
            headers=exc.headers,
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        errors = exc.errors()
        typed = [e["type"] for e in errors if e.get("type") in TYPED_FIELD_ERRORS]
        for err in errors[:10]:
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            problems.append(f"{where}: {err.get('msg', 'invalid')}" if where else err.get("msg"))
        message = "; ".join(str(p) for p in problems) or "invalid request"
        code = typed[0] if typed else "validation_error"
        return JSONResponse(error_body(code, message), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = STATUS_CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return JSONResponse(
            error_body(code, message), status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(psycopg.OperationalError)  # PoolTimeout is one too
    async def _database_unavailable(
        request: Request, exc: psycopg.OperationalError
    ) -> JSONResponse:
        log.warning("database unavailable", error_type=type(exc).__name__)
        if connection_lost(exc):
            setattr(request.state, CONNECTION_LOST, True)  # RetryLostReads runs a read again
        return JSONResponse(
            error_body("database_unavailable", DATABASE_UNAVAILABLE),
            status_code=503,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", error_type=type(exc).__name__)
        return JSONResponse(
            error_body("internal_error", "something went wrong on our side; please retry"),
            status_code=500,
        )
