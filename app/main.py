"""The ASGI application: routers, middleware, error handlers. Nothing else."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from langchain_core.language_models import BaseChatModel

from app import tracing
from app.api import lg, openapi
from app.api.middleware import BodyLimit, PageHeaders, RequestId, page_headers
from app.api.route_methods import PageMount, RouteMethods
from app.api.routes import (
    actions,
    analytics,
    auth,
    health,
    help,
    memory,
    messages,
    runs,
    staff,
    threads,
)
from app.api.routes import channels as channel_routes
from app.api.routes.policies import router as policy_router
from app.config import Settings
from app.errors import install_error_handlers
from app.lifespan import lifespan_for
from app.logging import hide_query_strings

STATIC_DIR = Path(__file__).parent / "static"
# The chat page loads only its own scripts, styles and API; index.html carries the same
# policy in a meta tag, which cannot say frame-ancestors.
CHAT_PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
CORS_HEADERS = ["authorization", "x-api-key", "last-event-id", "content-type"]


def create_app(settings: Settings | None = None, *, model: BaseChatModel | None = None) -> FastAPI:
    settings = settings or Settings()
    # Here rather than in `serve`: every uvicorn worker process builds its app with this.
    hide_query_strings()
    tracing.configure(settings)  # per process too: an exporter does not survive a fork
    app = FastAPI(
        title="cs-agent",
        version="0.1.0",
        summary="Customer-service agent: threads, SSE token streaming, state and rewind.",
        lifespan=lifespan_for(settings, model),
        docs_url="/docs" if settings.serves_api_docs else None,
        redoc_url="/redoc" if settings.serves_api_docs else None,
        openapi_url="/openapi.json" if settings.serves_api_docs else None,
    )
    install_error_handlers(app)
    routers = (health, auth, threads, messages, runs, memory, help, staff, analytics, actions)
    for router in (r.router for r in routers):
        app.include_router(router)
    app.include_router(policy_router)  # issue 42
    app.include_router(lg.router)  # the LangGraph Platform API, under /lg
    app.include_router(channel_routes.router)  # Chatwoot and email (docs/channels.md)
    openapi.install(app)
    if (STATIC_DIR / "console.html").exists():
        app.add_api_route("/console", _console_page, include_in_schema=False)
    if (STATIC_DIR / "console-analytics.html").exists():
        app.add_api_route("/console/analytics", _analytics_page, include_in_schema=False)
    if (STATIC_DIR / "console-policies.html").exists():  # issue 42
        app.add_api_route("/console/policies", _policies_page, include_in_schema=False)
    if (STATIC_DIR / "index.html").exists():
        page = PageHeaders(StaticFiles(directory=STATIC_DIR, html=True), CHAT_PAGE_CSP)
        app.router.routes.append(PageMount(page, STATIC_DIR))
    app.add_middleware(RouteMethods)
    app.add_middleware(BodyLimit)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],  # /lg uses PUT, PATCH
            allow_headers=CORS_HEADERS,
            expose_headers=["Location", "Content-Location"],
            max_age=600,
        )
    app.add_middleware(RequestId)
    if tracing.enabled():  # outermost; while tracing is off, not even a middleware call
        app.add_middleware(tracing.RequestSpans)
    return app


async def _console_page() -> FileResponse:
    """The staff console (app/static/console.html), under the chat page's policy."""
    return FileResponse(STATIC_DIR / "console.html", headers=page_headers(CHAT_PAGE_CSP))


async def _analytics_page() -> FileResponse:
    """The console's analytics page (app/static/console-analytics.html); its data comes
    from the staff-only /staff/analytics API, so the page itself holds nothing."""
    path = STATIC_DIR / "console-analytics.html"
    return FileResponse(path, headers=page_headers(CHAT_PAGE_CSP))


async def _policies_page() -> FileResponse:
    """The console's policies page (app/static/console-policies.html); its data comes from
    the staff-only /staff/policies API."""
    path = STATIC_DIR / "console-policies.html"
    return FileResponse(path, headers=page_headers(CHAT_PAGE_CSP))
