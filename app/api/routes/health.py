"""Liveness and readiness; no authentication."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from app.api.deps import ServicesDep
from app.db.migrate import head_revision
from app.db.pool import ServicePool
from app.metrics import CONTENT_TYPE

router = APIRouter(tags=["health"])
# A probe answers within this (plus a second for the query), the database up or down.
READY_TIMEOUT_S = 2.0


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep) -> JSONResponse:
    """What is true right now: the database answers through the pool, and is migrated."""
    body: dict[str, Any] = {"model": services.model_label}
    try:
        async with (
            asyncio.timeout(READY_TIMEOUT_S + 1),
            services.pool.connection(timeout=READY_TIMEOUT_S) as conn,
        ):
            cur = await conn.execute("SELECT version_num FROM alembic_version")
            row = await cur.fetchone()
        revision = row["version_num"] if row else None
    except Exception:
        # No pooled connection: say whether the database is down or every connection busy.
        pool = services.pool
        up = isinstance(pool, ServicePool) and await pool.database_reachable()
        state = {"database": "ok", "pool": "exhausted"} if up else {"database": "unreachable"}
        return JSONResponse({**body, "status": "unavailable", **state}, status_code=503)
    if revision != head_revision():
        return JSONResponse(
            {**body, "status": "unavailable", "database": "ok", "migrations": "behind"},
            status_code=503,
        )
    ready = {**body, "status": "ok", "database": "ok", "migrations": "head"}
    if services.actions is not None:  # a source that is down does not make the service unready
        ready["sources"] = await services.actions.statuses()
    return JSONResponse(ready)


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(services: ServicesDep) -> Response:
    """The service's metrics in the Prometheus text format (no authentication): with several
    workers, all of theirs added up (app/metrics.py). The pool and the handoff queue are
    sampled now."""
    with contextlib.suppress(Exception):  # the database away: the other metrics still answer
        await services.metrics.sample_queue(services.pool)
    return Response(services.metrics.render(services.pool), media_type=CONTENT_TYPE)
