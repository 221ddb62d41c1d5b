from __future__ import annotations

from typing import Any

from fastapi import Request

from app.api.schemas import ErrorBody
from app.errors import AppError

JSON_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody},
    404: {"model": ErrorBody},
    409: {"model": ErrorBody},
    413: {"model": ErrorBody},
    415: {"model": ErrorBody},
    422: {"model": ErrorBody},
}


async def require_json(request: Request) -> None:
    """415 for a request body that is not JSON."""
    if request.method in ("POST", "PUT", "PATCH"):
        length = request.headers.get("content-length")
        if length == "0" and "content-type" not in request.headers:
            return
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise AppError(
                "send the body as application/json",
                code="unsupported_media_type",
                status_code=415,
            )
