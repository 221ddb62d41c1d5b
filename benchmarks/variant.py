"""Our service with proposed changes applied by monkeypatch, to measure their gain.

    BENCH_VARIANT=lockless python -m benchmarks.variant serve --no-seed --port P
    (same arguments as `python -m app`; BENCH_VARIANT is a comma-separated list)

- `lockless`: `AsyncPostgresSaver` serialises every checkpoint read and write of the whole
  process behind one `asyncio.Lock` (`self.lock` in `_cursor`), even when it was given a
  connection pool, where each operation takes its own connection and the lock protects
  nothing. The patched `_cursor` skips the lock when `conn` is a pool.
- `async`: the run streams the graph with `durability="async"` instead of "sync": each
  step's checkpoint is written while the next step runs, and the run still ends only
  after every write landed.
- `workers=N`: N uvicorn worker processes on one port (`uvicorn.run(..., factory=True,
  workers=N)`), each with its own lifespan (pools, checkpointer, graph). The design keeps
  every shared thing in Postgres, so nothing else changes. Migrations must already be
  applied (the benchmark seeds first).

Nothing under app/ is edited; the proposals for the owners are in RESULTS.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

_locked_cursor = AsyncPostgresSaver._cursor


@asynccontextmanager
async def _pooled_cursor(self: AsyncPostgresSaver, *, pipeline: bool = False) -> AsyncIterator[Any]:
    if not isinstance(self.conn, AsyncConnectionPool) or self.pipe is not None:
        async with _locked_cursor(self, pipeline=pipeline) as cur:
            yield cur
        return
    async with self.conn.connection() as conn:
        if pipeline and self.supports_pipeline:
            async with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                yield cur
        elif pipeline:
            async with conn.transaction(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                yield cur
        else:
            async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                yield cur


def _async_durability() -> None:
    from langgraph.pregel import Pregel

    astream = Pregel.astream

    def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("durability") == "sync":
            kwargs["durability"] = "async"
        return astream(self, *args, **kwargs)

    Pregel.astream = patched  # type: ignore[method-assign]


def serve_workers(workers: int, argv: list[str]) -> None:
    import argparse

    import uvicorn

    from app.config import Settings

    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--no-seed", action="store_true")
    args = parser.parse_args(argv)
    settings = Settings()
    host, port = args.host or settings.host, args.port or settings.port
    print(f"cs-agent ({workers} workers) serving on http://{host}:{port}", flush=True)
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
    )


def apply(changes: str) -> None:
    for change in filter(None, (c.strip() for c in changes.split(","))):
        if change.startswith("workers="):
            continue  # handled by main()
        if change == "lockless":
            AsyncPostgresSaver._cursor = _pooled_cursor  # type: ignore[method-assign]
        elif change == "async":
            _async_durability()
        else:
            raise SystemExit(f"unknown BENCH_VARIANT change {change!r}")


def main() -> None:
    changes = os.environ.get("BENCH_VARIANT", "lockless")
    apply(changes)
    workers = [int(c.split("=", 1)[1]) for c in changes.split(",") if c.startswith("workers=")]
    if workers:
        serve_workers(workers[0], sys.argv[1:])
        return
    from app.cli import main as app_main

    app_main(sys.argv[1:])


if __name__ == "__main__":
    main()
