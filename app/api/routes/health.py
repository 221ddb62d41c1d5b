"""Liveness and readiness; no authentication."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from app.api.deps import ServicesDep
from app.db.migrate import head_revision

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep) -> JSONResponse:
    body: dict[str, Any] = {"model": services.model_label}
    try:
        async with asyncio.timeout(3), services.pool.connection() as conn:
            cur = await conn.execute("SELECT version_num FROM alembic_version")
            row = await cur.fetchone()
        revision = row["version_num"] if row else None
    except Exception:
        return JSONResponse(
            {**body, "status": "unavailable", "database": "unreachable"}, status_code=503
        )
    if revision != head_revision():
        return JSONResponse(
            {**body, "status": "unavailable", "database": "ok", "migrations": "behind"},
            status_code=503,
        )
    return JSONResponse({**body, "status": "ok", "database": "ok", "migrations": "head"})


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(services: ServicesDep) -> PlainTextResponse:
    """Counters of this process in the Prometheus text format (no authentication)."""
    return PlainTextResponse(
        services.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
    )
