"""The thinnest HTTP + SSE service around the same compiled graph: a second ceiling.

    python -m benchmarks.thin --port P --checkpointer memory|postgres
    (DATABASE_URL, OPENAI_BASE_URL and JWT_SECRET from the environment, as for the service)

FastAPI and sse-starlette, as the service, and the graph exactly as `benchmarks.inproc`
builds it, with the service's GC settings and, with `postgres`, its checkpointer and held
rows. Nothing else: the token is verified, and there is no thread ownership check, no run
record, no thread lock, no queue between run and response, no error mapping, no replay. It
answers what any FastAPI + SSE service built on this graph could reach on this machine, with
and without a durable checkpoint. Not a product: the benchmark's yardstick only.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from sse_starlette.sse import EventSourceResponse

from app.api.auth import bearer_token, verify_token
from benchmarks.inproc import InProcess, open_in_process


def build_app(database_url: str, model_url: str, checkpointer: str, secret: str) -> FastAPI:
    graph: dict[str, InProcess] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        graph["target"] = await open_in_process(database_url, model_url, checkpointer)
        yield
        await graph["target"].close()

    app = FastAPI(lifespan=lifespan)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/threads/{session}/messages")
    async def post_message(session: str, request: Request) -> EventSourceResponse:
        user = verify_token(secret, bearer_token(request.headers.get("authorization")))
        text = (await request.json())["content"]
        tokens = graph["target"].tokens(user.user_id, session, text, user.role)

        async def events() -> AsyncIterator[dict[str, str]]:
            yield {"event": "run", "data": "{}"}
            async for token in tokens:
                yield {"event": "token", "data": json.dumps({"text": token})}
            yield {"event": "done", "data": json.dumps({"status": "completed"})}

        return EventSourceResponse(events())

    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.thin")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--checkpointer", choices=["memory", "postgres"], default="memory")
    args = parser.parse_args(argv)
    env: Any = os.environ
    app = build_app(
        env["DATABASE_URL"], env["OPENAI_BASE_URL"], args.checkpointer, env["JWT_SECRET"]
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
