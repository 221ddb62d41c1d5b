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
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.prebuilt import create_react_agent
from langgraph.runtime import get_runtime
from pydantic import BaseModel

from app.config import Settings
from app.db.pool import open_pool
from app.db.repository import ShopRepository
from app.domain import pending_orders
from app.domain.errors import RuleViolation
from app.identity import AgentContext
from app.tools.registry import build_tools

PROMPT = (
    "You are the customer-service agent of an online shop. Be brief, friendly and exact. "
    "Use tools for facts; never invent orders, amounts or policies."
)


CANCEL = "cancel_pending_order"


class ChatIn(BaseModel):
    thread_id: str
    user_id: str
    message: str


def tutorial_cancel(pool: Any) -> BaseTool:
    """The tutorial's write: a plain tool that runs the same rule in one transaction, for
    the request's user (our write tools run only inside our own runs: a ledger row, an
    idempotency key, a verified customer, so the peer's call of ours is refused before any
    statement). Only the cancel is replaced: the model is offered the same tools."""

    @tool
    async def cancel_pending_order(order_id: str, reason: str) -> str:
        """Cancel a pending order (reason: 'no longer needed' or 'ordered by mistake')."""
        user_id = get_runtime(AgentContext).context.user_id
        async with pool.connection() as conn, conn.transaction():
            repo = ShopRepository(conn)
            order = await repo.get_order(order_id, for_update=True)
            customer = await repo.get_customer(user_id, for_update=True)
            if order is None or customer is None or order.customer_id != user_id:
                return "Error: order not found."
            try:
                change = pending_orders.cancel_pending_order(order, customer, reason)
            except RuleViolation as error:
                return f"Error: {error}"
            await repo.save_order(order, change.order)
            await repo.apply_balance_deltas(user_id, change.balance_deltas)
        return json.dumps({"order_id": order_id, "status": change.order.status})

    return cancel_pending_order


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    url = os.environ["DATABASE_URL"]
    # The tools are the service's own, on the same kind of pool, so a tool call costs the same.
    pool = await open_pool(url, Settings(), name="peer-tools")
    try:
        async with AsyncPostgresSaver.from_conn_string(url) as checkpointer:
            await checkpointer.setup()
            model = ChatOpenAI(model="gpt-4o-mini", temperature=0)
            tools = build_tools(pool)
            app.state.agent = create_react_agent(
                model,
                [*tools.read, *(t for t in tools.write if t.name != CANCEL), tutorial_cancel(pool)],
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
