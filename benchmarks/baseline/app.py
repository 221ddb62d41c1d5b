"""The tutorial-style peer service. Run: `python -m benchmarks.baseline --port 8300`.

Reads DATABASE_URL, OPENAI_BASE_URL and OPENAI_API_KEY from the environment, like the
tutorials do. No auth, no thread locks, no trimming, no run records: the request body
names the thread and the user.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from langchain_core.messages import AIMessageChunk, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.prebuilt import create_react_agent
from pydantic import BaseModel

from app.config import Settings
from app.db.pool import open_pool
from app.identity import AgentContext
from app.tools.registry import build_tools

PROMPT = (
    "You are the customer-service agent of an online shop. Be brief, friendly and exact. "
    "Use tools for facts; never invent orders, amounts or policies."
)


class ChatIn(BaseModel):
    thread_id: str
    user_id: str
    message: str


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    url = os.environ["DATABASE_URL"]
    # The tools are the service's own, on the same kind of pool, so a tool call costs the same.
    pool = await open_pool(url, Settings(), name="peer-tools")
    try:
        async with AsyncPostgresSaver.from_conn_string(url) as checkpointer:
            await checkpointer.setup()
            model = ChatOpenAI(model="gpt-4o-mini", temperature=0)
            app.state.agent = create_react_agent(
                model,
                build_tools(pool).all,
                prompt=PROMPT,
                checkpointer=checkpointer,
                context_schema=AgentContext,
            )
            yield
    finally:
        await pool.close()


app = FastAPI(lifespan=lifespan)


@app.post("/chat")
async def chat(body: ChatIn, request: Request) -> StreamingResponse:
    agent = request.app.state.agent
    config: Any = {"configurable": {"thread_id": body.thread_id}}
    context = AgentContext(user_id=body.user_id, role="customer", thread_id=body.thread_id)

    async def stream() -> AsyncIterator[str]:
        async for message, _meta in agent.astream(
            {"messages": [HumanMessage(content=body.message)]},
            config,
            context=context,
            stream_mode="messages",
        ):
            if isinstance(message, AIMessageChunk) and message.content:
                yield f"data: {json.dumps({'content': message.content})}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}
