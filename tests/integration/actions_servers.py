"""Two real servers a company might own, for the actions tests, each run as its own process:

    python -m tests.integration.actions_servers mcp --port N       # "loyalty", MCP (mcp SDK)
    python -m tests.integration.actions_servers openapi --port N   # "billing", OpenAPI 3

Each records every request it gets (tool, arguments, idempotency key, and whether the
X-Customer-Token verified: signature, `aud`, `exp`), serves them at `GET /_seen`, and is
steered by `POST /_mode {"mode": "normal" | "hold" | "fail" | "slow"}`: `hold` applies a
write and then never answers (a call in flight when the service dies), `fail` answers 500
(MCP: an internal error), `slow` answers after 3 s. Idempotent writes are applied once per
key; a repeated key gets the first answer. With `--journal PATH` every applied write is
also appended to PATH as a JSON line, on disk before the answer goes (the chaos soak
counts them after the run: tests/chaos/actions.py).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

import jwt
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

LOYALTY_SECRET = "loyalty-identity-secret-0123456789"
BILLING_SECRET = "billing-identity-secret-0123456789"
SLOW_S = 3.0


class Books:
    """What a server saw and did."""

    def __init__(self, source: str, secret: str, journal: Path | None = None) -> None:
        self.source, self.secret, self.journal = source, secret, journal
        self.seen: list[dict[str, Any]] = []
        self.applied: list[dict[str, Any]] = []
        self.by_key: dict[str, Any] = {}
        self.mode = "normal"
        self.ids = itertools.count(1)

    def token(self, value: str | None) -> dict[str, Any]:
        if not value:
            return {"present": False}
        try:
            claims = jwt.decode(
                value,
                self.secret,
                algorithms=["HS256"],
                audience=self.source,
                options={"require": ["sub", "aud", "iat", "exp", "jti"]},
            )
        except jwt.PyJWTError as error:
            return {"present": True, "valid": False, "error": type(error).__name__}
        return {
            "present": True,
            "valid": claims["exp"] - claims["iat"] <= 300 and claims["exp"] > time.time(),
            "sub": claims["sub"],
            "ttl": claims["exp"] - claims["iat"],
        }

    def record(
        self,
        tool: str,
        args: dict[str, Any],
        key: str | None,
        token: str | None,
        headers: dict[str, str],
        peer: Any = None,
    ) -> None:
        self.seen.append(
            {
                "tool": tool,
                "args": args,
                "key": key,
                "token": self.token(token),
                "authorization": headers.get("authorization"),
                "port": peer.port if peer is not None else None,  # the client's TCP port
            }
        )

    def apply(self, entry: dict[str, Any]) -> None:
        """An applied write: kept, and journalled (fsync) before it is answered."""
        self.applied.append(entry)
        if self.journal is not None:
            with self.journal.open("a", encoding="utf-8") as out:
                out.write(json.dumps(entry) + "\n")
                out.flush()
                os.fsync(out.fileno())

    async def behave(self) -> None:
        if self.mode == "fail":
            raise RuntimeError("Traceback (most recent call last): internal database exploded")
        if self.mode == "slow":
            await asyncio.sleep(SLOW_S)

    async def hold_if_asked(self) -> None:
        if self.mode == "hold":
            await asyncio.sleep(3600)

    def routes(self) -> list[Route]:
        async def seen(request: Request) -> Response:
            return JSONResponse({"seen": self.seen, "applied": self.applied})

        async def mode(request: Request) -> Response:
            self.mode = (await request.json())["mode"]
            return JSONResponse({"mode": self.mode})

        return [Route("/_seen", seen, methods=["GET"]), Route("/_mode", mode, methods=["POST"])]


def loyalty_app(journal: Path | None = None) -> Starlette:
    books = Books("loyalty", LOYALTY_SECRET, journal)
    server = MCPServer("loyalty")

    def note(ctx: Context, tool: str, args: dict[str, Any]) -> str | None:
        headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
        meta = ctx.request_context.meta or {}
        found = meta.get("cs-agent/idempotency-key")
        key = found if isinstance(found, str) else None
        request = ctx.request_context.request
        peer = getattr(request, "client", None)
        books.record(tool, args, key, headers.get("x-customer-token"), headers, peer)
        return key

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True), title="Checking your points")
    async def get_points(customer_id: str, ctx: Context) -> dict[str, Any]:
        """The loyalty points balance of a customer."""
        note(ctx, "get_points", {"customer_id": customer_id})
        await books.behave()
        return {"customer_id": customer_id, "points": 1200}

    @server.tool(annotations=ToolAnnotations(idempotentHint=True, destructiveHint=False))
    async def issue_voucher(customer_id: str, amount: int, ctx: Context) -> dict[str, Any]:
        """Issue a voucher of `amount` to a customer."""
        key = note(ctx, "issue_voucher", {"customer_id": customer_id, "amount": amount})
        await books.behave()
        if key and key in books.by_key:
            return dict(books.by_key[key])
        voucher = {
            "voucher_id": f"V{next(books.ids)}",
            "customer_id": customer_id,
            "amount": amount,
        }
        books.apply({"tool": "issue_voucher", "key": key, **voucher})
        if key:
            books.by_key[key] = voucher
        await books.hold_if_asked()
        return voucher

    @server.tool()
    async def redeem_points(customer_id: str, points: int, ctx: Context) -> dict[str, Any]:
        """Redeem loyalty points (not idempotent: every request redeems)."""
        key = note(ctx, "redeem_points", {"customer_id": customer_id, "points": points})
        await books.behave()
        books.apply(
            {"tool": "redeem_points", "key": key, "customer_id": customer_id, "points": points}
        )
        await books.hold_if_asked()
        return {"redeemed": points}

    app = server.streamable_http_app()
    for route in books.routes():
        app.router.routes.append(route)
    return app


def billing_app(journal: Path | None = None) -> Starlette:
    books = Books("billing", BILLING_SECRET, journal)
    document = {
        "openapi": "3.1.0",
        "info": {"title": "Billing", "version": "1"},
        "paths": {
            "/invoices/{invoice_id}": {
                "get": {
                    "operationId": "getInvoice",
                    "summary": "Look up an invoice of the customer.",
                    "parameters": [
                        {
                            "name": "invoice_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "customer_id",
                            "in": "query",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                    ],
                    "responses": {"200": {"description": "the invoice"}},
                }
            },
            "/refund-requests": {
                "post": {
                    "operationId": "createRefundRequest",
                    "summary": "Request a refund for an invoice.",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/RefundRequest"}
                            }
                        },
                    },
                    "responses": {"201": {"description": "the request"}},
                }
            },
        },
        "components": {
            "schemas": {
                "RefundRequest": {
                    "type": "object",
                    "required": ["invoice_id", "amount", "customer_id"],
                    "properties": {
                        "invoice_id": {"type": "string", "description": "The invoice."},
                        "amount": {"type": "number", "minimum": 0},
                        "customer_id": {"type": "string"},
                    },
                }
            }
        },
    }

    def note(request: Request, tool: str, args: dict[str, Any]) -> str | None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        key = headers.get("idempotency-key")
        books.record(tool, args, key, headers.get("x-customer-token"), headers, request.client)
        return key

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    async def get_invoice(request: Request) -> Response:
        args = {"invoice_id": request.path_params["invoice_id"], **request.query_params}
        note(request, "getInvoice", args)
        if books.mode == "fail":
            return Response("Traceback (most recent call last): boom", status_code=500)
        await books.behave()
        if args["invoice_id"] == "missing":
            return JSONResponse({"error": "no such invoice"}, status_code=404)
        return JSONResponse({**args, "total": 42.5, "status": "paid"})

    async def create_refund(request: Request) -> Response:
        body = await request.json()
        key = note(request, "createRefundRequest", body)
        if books.mode == "fail":
            return Response("Traceback (most recent call last): boom", status_code=500)
        await books.behave()
        if key and key in books.by_key:
            return JSONResponse(books.by_key[key], status_code=201)
        made = {"refund_request_id": f"R{next(books.ids)}", **body}
        books.apply({"tool": "createRefundRequest", "key": key, **made})
        if key:
            books.by_key[key] = made
        await books.hold_if_asked()
        return JSONResponse(made, status_code=201)

    return Starlette(
        routes=[
            Route("/openapi.json", openapi),
            Route("/invoices/{invoice_id}", get_invoice, methods=["GET"]),
            Route("/refund-requests", create_refund, methods=["POST"]),
            *books.routes(),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["mcp", "openapi"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--journal", type=Path, default=None)
    args = parser.parse_args()
    app = loyalty_app(args.journal) if args.kind == "mcp" else billing_app(args.journal)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
