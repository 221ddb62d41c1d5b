"""The LangGraph Platform API, under `/lg`: what the official SDKs, `useStream` and Agent
Chat UI call, mapped onto cs-agent's threads and runs (docs/langgraph-api.md)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.lg import assistants, runs, store, threads
from app.api.routes.common import JSON_ERRORS

PREFIX = "/lg"

router = APIRouter(prefix=PREFIX, responses=JSON_ERRORS)
for _module in (assistants, threads, runs, store):
    router.include_router(_module.router)
