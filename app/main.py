"""The ASGI application: routers, middleware, error handlers. Nothing else."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from langchain_core.language_models import BaseChatModel

from app.api.middleware import BodyLimit, RequestId
from app.api.routes import auth, health, help, memory, messages, threads
from app.config import Settings
from app.errors import install_error_handlers
from app.lifespan import lifespan_for
from app.logging import hide_query_strings

STATIC_DIR = Path(__file__).parent / "static"


def create_app(settings: Settings | None = None, *, model: BaseChatModel | None = None) -> FastAPI:
    settings = settings or Settings()
    # Here rather than in `serve`: every uvicorn worker process builds its app with this.
    hide_query_strings()
    app = FastAPI(
        title="cs-agent",
        version="0.1.0",
        summary="Customer-service agent: threads, SSE token streaming, state and rewind.",
        lifespan=lifespan_for(settings, model),
    )
    install_error_handlers(app)
    routers = (health, auth, threads, messages, memory, help)
    for router in (r.router for r in routers):
        app.include_router(router)
    if (STATIC_DIR / "index.html").exists():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="static")
    app.add_middleware(BodyLimit)
    app.add_middleware(RequestId)
    return app
