"""What the numbers were measured on."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

import psutil  # type: ignore[import-untyped]
import psycopg


def cores() -> int:
    return os.cpu_count() or 1


def describe(admin_url: str) -> dict[str, Any]:
    with psycopg.connect(admin_url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        settings: dict[str, str] = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('max_connections',"
                " 'shared_buffers', 'synchronous_commit', 'fsync', 'shared_preload_libraries')"
            ).fetchall()
        )
    cpu_model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cores": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "postgres": row[0] if row else "?",
        "postgres_settings": settings,
        "packages": _versions(
            "langgraph",
            "langgraph-checkpoint",
            "langgraph-checkpoint-postgres",
            "langgraph-prebuilt",
            "langchain-core",
            "langchain-openai",
            "openai",
            "fastapi",
            "uvicorn",
            "sse-starlette",
            "psycopg",
            "httpx",
        ),
    }


def load_now() -> dict[str, Any]:
    one, five, fifteen = os.getloadavg()
    busy = psutil.cpu_percent(interval=1.0)
    return {"loadavg": [one, five, fifteen], "cpu_percent_1s": busy}


def _versions(*names: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found
