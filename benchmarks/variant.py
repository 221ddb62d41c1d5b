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


def apply(changes: str) -> None:
    for change in filter(None, (c.strip() for c in changes.split(","))):
        if change == "lockless":
            AsyncPostgresSaver._cursor = _pooled_cursor  # type: ignore[method-assign]
        elif change == "async":
            _async_durability()
        else:
            raise SystemExit(f"unknown BENCH_VARIANT change {change!r}")


def main() -> None:
    apply(os.environ.get("BENCH_VARIANT", "lockless"))
    from app.cli import main as app_main

    app_main(sys.argv[1:])


if __name__ == "__main__":
    main()
