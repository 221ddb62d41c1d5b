"""Pure ASGI middleware: request ids for logs, a cap on request body size, page headers."""

from __future__ import annotations

import json
import re
import uuid

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 64 * 1024
# A client's X-Request-Id goes into every log line and back into the response: only a short
# token of safe characters is kept, anything else is replaced by a generated id.
REQUEST_ID_RE = re.compile(rb"[A-Za-z0-9._-]{1,64}")


async def _reject(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """413 for bodies over the cap, whether announced by Content-Length or sent chunked.

    A chunked body is read here, up to the cap, before the app sees it: a limit raised from
    inside `receive` reaches FastAPI's body parser, which turns every error into a 400.
    """

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None:
            # the server delivers no more than Content-Length bytes
            if length.isdigit() and int(length) > self.limit:
                await self._too_large(send)
                return
        elif b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            body = bytearray()
            more = True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                body += message.get("body", b"")
                if len(body) > self.limit:
                    await self._too_large(send)
                    return
                more = message.get("more_body", False)
            receive = _replay(bytes(body), receive)
        await self.app(scope, receive, send)

    async def _too_large(self, send: Send) -> None:
        await _reject(
            send, 413, "payload_too_large", f"request bodies are limited to {self.limit} bytes"
        )


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body read ahead, as one message; then the server's own (a disconnect)."""
    pending = True

    async def replayed() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


class RequestId:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        incoming = headers.get(b"x-request-id", b"")
        safe = REQUEST_ID_RE.fullmatch(incoming) is not None
        request_id = incoming.decode("ascii") if safe else uuid.uuid4().hex

        async def with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=request_id):
            await self.app(scope, receive, with_header)


def page_headers(csp: str) -> dict[str, str]:
    """What every HTML page (and its assets) is sent with: its Content-Security-Policy, no
    framing by other sites, no referrer, no content sniffing."""
    return {
        "Content-Security-Policy": csp,
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }


class PageHeaders:
    """Adds `page_headers(csp)` to every response of the wrapped app (the static chat page)."""

    def __init__(self, app: ASGIApp, csp: str) -> None:
        self.app = app
        self.headers = [(k.lower().encode(), v.encode()) for k, v in page_headers(csp).items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self.headers]
            await send(message)

        await self.app(scope, receive, with_headers)
