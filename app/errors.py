"""One error hierarchy, rendered by one handler as `{"error": {"code", "message"}}`."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

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
    code = "thread_busy"

    def __init__(self) -> None:
        super().__init__("another reply is in progress on this thread; try again when it ends")


class RateLimited(AppError):
    """429: a rate limit or a budget is spent; `Retry-After` says when to try again."""

    status_code = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: int, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = max(1, retry_after_s)
        self.headers = {"Retry-After": str(self.retry_after_s)}


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def thread_not_found() -> NotFound:
    # One message for "missing" and "someone else's": existence must never leak.
    return NotFound("thread not found", code="thread_not_found")


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
    @app.exception_handler(AppError)
    async def _app_error(request: Request, exc: AppError) -> JSONResponse:
        if isinstance(exc, ThreadBusy):  # counted here: posts, resumes, rewinds and deletes
            services = getattr(request.app.state, "services", None)
            if services is not None:
                services.metrics.add("cs_agent_thread_busy_total")
        return JSONResponse(
            error_body(exc.code, exc.message), status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors()[:10]:
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            problems.append(f"{where}: {err.get('msg', 'invalid')}" if where else err.get("msg"))
        message = "; ".join(str(p) for p in problems) or "invalid request"
        return JSONResponse(error_body("validation_error", message), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = STATUS_CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return JSONResponse(
            error_body(code, message), status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", error_type=type(exc).__name__)
        return JSONResponse(
            error_body("internal_error", "something went wrong on our side; please retry"),
            status_code=500,
        )
