"""Structured logs: JSON in prod, readable in dev; request/thread/run ids via contextvars.

uvicorn's access lines show the path without its query string (`hide_query_strings`).
"""

from __future__ import annotations

import logging

import structlog

from app.config import Settings
from app.tracing import log_processors


def configure_logging(settings: Settings) -> None:
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if settings.app_env == "prod"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    level = logging.getLevelNamesMapping().get(settings.log_level.upper(), logging.INFO)
    logging.basicConfig(level=level, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *log_processors(settings),  # the trace id, when tracing is on
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        cache_logger_on_first_use=True,
    )


class _PathWithoutQuery(logging.Filter):
    """uvicorn's access line without the query string, which may carry a token or a search."""

    def filter(self, record: logging.LogRecord) -> bool:
        # uvicorn logs `'%s - "%s %s HTTP/%s" %d'` with (client, method, path?query, version,
        # status); anything else passes unchanged.
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (args[0], args[1], args[2].partition("?")[0], args[3], args[4])
        return True


def hide_query_strings() -> None:
    """Strip query strings from uvicorn's access log. Idempotent; a logger's filters outlive
    uvicorn's own logging set-up, which only replaces handlers."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _PathWithoutQuery) for f in access.filters):
        access.addFilter(_PathWithoutQuery())
