"""What the page says while a tool of the actions file runs (docs/actions.md); the built-in
tools' labels are in app/static/tool-labels.js. No authentication: labels only."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import ServicesDep

router = APIRouter(tags=["actions"])


@router.get("/tool-labels")
async def tool_labels(services: ServicesDep) -> dict[str, dict[str, dict[str, str]]]:
    actions = services.actions
    return {"labels": actions.labels() if actions is not None else {}}
