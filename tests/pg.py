"""Where tests find a real PostgreSQL: the machine's server, else the embedded one."""

from __future__ import annotations

import os
import socket
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg

LOCAL_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def admin_url() -> str:
    explicit = os.environ.get("TEST_ADMIN_DATABASE_URL")
    if explicit:
        return explicit
    if _reachable("127.0.0.1", 5432):
        try:
            with psycopg.connect(LOCAL_ADMIN_URL, connect_timeout=2):
                return LOCAL_ADMIN_URL
        except psycopg.Error:
            pass
    from app.db.embedded import start_embedded

    return start_embedded(os.environ.get("TEST_DATA_DIR", ".data/test"))


def with_database(url: str, dbname: str) -> str:
    """Swap the database name in a postgresql:// URL (query string such as ?host= kept)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def create_fresh_database(prefix: str = "csagent_test") -> tuple[str, str]:
    """Create an empty database; return (its url, the admin url that can drop it)."""
    admin = admin_url()
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(admin, name), admin


def drop_database(admin: str, url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
