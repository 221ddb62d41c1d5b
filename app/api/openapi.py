"""The OpenAPI document: FastAPI's, completed with what the routes share and cannot each
say for themselves, so that it states what the service does (issue 45):

- every error status an operation can answer, each with the one error body
  (`{"error": {"code", "message", ...}}`): the statuses follow from what the operation
  takes (a token, path parameters, a JSON body) and from the middleware every request
  passes (the body limit, the database's 503);
- the `JsonValue` and `EmptyJson` schemas of client JSON (app/api/clientjson.py);
- a summary, a description and examples (app/api/openapi_text.py) where the route has
  none of its own.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api import openapi_text as text
from app.api.clientjson import openapi_components

ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
ERRORS = {
    "400": "The body is not JSON (`bad_request`).",
    "401": "No valid bearer token (`unauthorized`); `WWW-Authenticate: Bearer`.",
    "404": "Not found, or not the caller's: the two are one answer, so existence never leaks.",
    "409": "A conflict with the thread's state (`thread_busy` with `Retry-After`, "
    "`run_finished`, `version_conflict`, ...).",
    "413": "The body is larger than the service accepts (`payload_too_large`).",
    "415": "The body is not `application/json` (`unsupported_media_type`).",
    "422": "A parameter or a field is invalid (`validation_error`, or a typed code such as "
    "`client_json_invalid`); `message` says which and why.",
    "429": "A rate limit or the daily token budget is spent (`rate_limited`); `Retry-After`.",
    "503": "The database is unavailable for a moment (`database_unavailable`), or, on a post "
    "or a resume, the replica is serving all the turns it can (`overloaded`); `Retry-After`.",
}
NO_DATABASE = frozenset({"/healthz"})  # answered from the process alone


def _statuses(path: str, operation: dict[str, Any]) -> set[str]:
    params = operation.get("parameters", [])
    where = {p["in"] for p in params}
    signed_in = any(p["in"] == "header" and p["name"] == "authorization" for p in params)
    statuses: set[str] = set()
    if signed_in:
        statuses |= {"401", "429"}  # failed sign-ins are limited per client
    if "path" in where:
        statuses.add("404")
    if params or "requestBody" in operation:
        statuses.add("422")
    if "requestBody" in operation:
        statuses |= {"400", "413", "415"}
    if path not in NO_DATABASE:
        statuses.add("503")
    return statuses


def _complete_errors(path: str, operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    for status in sorted(_statuses(path, operation) | {s for s in responses if s in ERRORS}):
        answer = responses.setdefault(status, {})
        answer["description"] = ERRORS[status]
        answer["content"] = {"application/json": {"schema": ERROR_REF}}


STREAMS = ("/events", "/stream")  # paths whose 200 is only ever a stream


def _stream_only(path: str, operation: dict[str, Any]) -> None:
    """A stream's 200 is text/event-stream alone (FastAPI documents application/json)."""
    if path.endswith(STREAMS):
        ok = operation.get("responses", {}).setdefault("200", {"description": "A stream"})
        content = ok.setdefault("content", {})
        content.pop("application/json", None)
        content.setdefault("text/event-stream", {})


def _words(name: str, operation: dict[str, Any]) -> None:
    if name in text.OPERATIONS:
        summary, description = text.OPERATIONS[name]
        operation["summary"] = summary
        operation.setdefault("description", description)


def _examples(name: str, path: str, operation: dict[str, Any]) -> None:
    for param in operation.get("parameters", []):
        if "example" in param or "examples" in param:
            continue
        if param["in"] == "path" and param["name"] == "thread_id":
            prefix = next((p for p in text.THREAD_IDS if path.startswith(p)), None)
            if prefix:
                param["example"] = text.THREAD_IDS[prefix]
        elif (param["in"], param["name"]) in text.PARAMETERS:
            param["example"] = text.PARAMETERS[(param["in"], param["name"])]
    body = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if body is not None and "example" not in body:
        model = str(body.get("schema", {}).get("$ref", "")).rpartition("/")[2]
        if model in text.BODIES:
            body["example"] = text.BODIES[model]
    if name in text.RESPONSES:
        success = next(s for s in sorted(operation["responses"]) if s.startswith("2"))
        content = operation["responses"][success].setdefault("content", {})
        media = next(iter(content), "application/json")
        content.setdefault(media, {})["example"] = text.RESPONSES[name]


def complete(schema: dict[str, Any]) -> dict[str, Any]:
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            name = f"{method.upper()} {path}"
            _complete_errors(path, operation)
            _stream_only(path, operation)
            _words(name, operation)
            _examples(name, path, operation)
    schema.setdefault("components", {}).setdefault("schemas", {}).update(openapi_components())
    return schema


def document(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        app.openapi_schema = complete(
            get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                description=app.description,
                routes=app.routes,
            )
        )
    return app.openapi_schema


def install(app: FastAPI) -> None:
    app.openapi = lambda: document(app)  # type: ignore[method-assign]
