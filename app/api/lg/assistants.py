"""The server's description and its one assistant, `agent`, with a stable id."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import APIRouter, Depends

from app.api.lg.deps import LgUser
from app.api.lg.schemas import AssistantSearch
from app.api.lg.views import GRAPH_ID, assistant, is_our_assistant
from app.api.routes.common import require_json
from app.errors import NotFound

router = APIRouter(tags=["langgraph: assistants"])


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


@router.get("/info")
async def info() -> dict[str, Any]:
    """What clients probe to see a LangGraph server (public, as on the Platform)."""
    return {
        "version": _version("cs-agent"),
        "langgraph_py_version": _version("langgraph"),
        "flags": {"assistants": True, "crons": False, "langsmith": False},
        "host": {"kind": "cs-agent"},
    }


@router.post("/assistants/search", dependencies=[Depends(require_json)])
async def search_assistants(body: AssistantSearch, _: LgUser) -> list[dict[str, Any]]:
    one = assistant()
    matches = (
        body.graph_id in (None, GRAPH_ID)
        and body.name in (None, one["name"])
        and all(one["metadata"].get(k) == v for k, v in (body.metadata or {}).items())
        and body.offset == 0
    )
    return [one] if matches else []


@router.get("/assistants/{assistant_id}")
async def get_assistant(assistant_id: str, _: LgUser) -> dict[str, Any]:
    """By its id, or by its graph id `agent`, as clients pass either."""
    if not is_our_assistant(assistant_id):
        raise NotFound("assistant not found", code="assistant_not_found")
    return assistant()
