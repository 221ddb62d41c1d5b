"""What pinning a thread to a policy version costs a turn (issue 42): the statement that
opens a run (`cs_begin_run`) as of migration 0022 against 0024's, which also reads (and on
a first turn writes) the thread's pin; and the process's side, the version's rules from
the per-process cache.

    .venv/bin/python -m benchmarks.policy_pin_cost [--n 2000]

Runs on a fresh database of the machine's Postgres. The statements are timed inside the
server (a loop in one plpgsql call, with the lease released after each), so the figures are
server work without the round trip, which is the same for both: the pin adds no round
trip. Rounds alternate between the two versions and the medians are printed (us per call).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import time
import uuid
from dataclasses import replace
from typing import Any

from psycopg import AsyncConnection

from app.db.migrate import migrate
from app.identity import AgentContext
from tests.pg import create_fresh_database, drop_database

MIGRATION = importlib.import_module("app.migrations.versions.0024_policy_versions")
ROUNDS = 7
FNS = ("cs_begin_run_0022", "cs_begin_run")
LOOP = """CREATE FUNCTION bench_turns(fn text, threads text[]) RETURNS float8
LANGUAGE plpgsql AS $$
DECLARE
    th text;
    t0 timestamptz := clock_timestamp();
BEGIN
    FOREACH th IN ARRAY threads LOOP
        EXECUTE format('SELECT * FROM %I($1, ''u'', $1, ''bench'', $2, 15000, NULL, NULL,'
                       ' 0, 0, 0)', fn) USING th, md5(random()::text);
        UPDATE thread_leases SET run_id = NULL, expires_at = clock_timestamp()
        WHERE thread_id = th;
    END LOOP;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1e6 / cardinality(threads);
END $$"""


async def turns(conn: AsyncConnection[Any], fn: str, threads: list[str]) -> float:
    cur = await conn.execute("SELECT bench_turns(%s, %s)", (fn, threads))
    row = await cur.fetchone()
    assert row is not None
    return float(row[0])


async def measure(url: str, n: int) -> list[tuple[str, float]]:
    old = MIGRATION.begin_run(pinned=False).replace("cs_begin_run(", "cs_begin_run_0022(", 1)
    first: dict[str, list[float]] = {fn: [] for fn in FNS}
    later: dict[str, list[float]] = {fn: [] for fn in FNS}
    async with await AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(old)
        await conn.execute(LOOP)
        for _ in range(ROUNDS):  # alternating, so a busy moment of the machine hits both
            for fn in FNS:
                threads = [f"u:{uuid.uuid4().hex}" for _ in range(n)]
                first[fn].append(await turns(conn, fn, threads))  # thread row made, pinned
                later[fn].append(await turns(conn, fn, threads))
    return [
        *((f"{fn}: first turn", statistics.median(first[fn])) for fn in FNS),
        *((f"{fn}: later turn", statistics.median(later[fn])) for fn in FNS),
    ]


def cache_hit_us(n: int = 200_000) -> float:
    """The process's share: the rules from the cache and the run's context with them."""
    rules = {1: "x" * 800}
    context = AgentContext(user_id="u", role="customer", thread_id="u:s", policy_version=1)
    started = time.perf_counter()
    for _ in range(n):
        replace(context, rules=rules.get(1))
    return (time.perf_counter() - started) / n * 1e6


async def main(n: int) -> None:
    url, admin = create_fresh_database("csagent_bench_pin")
    try:
        await migrate(url)
        rows = await measure(url, n)
    finally:
        drop_database(admin, url)
    print("| opening a run (server work, + lease release) | us per call |")
    print("|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.1f} |")
    print(f"| process: cached rules + context copy | {cache_hit_us():.2f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    asyncio.run(main(parser.parse_args().n))
