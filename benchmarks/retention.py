"""Retention, measured: database bytes per 1,000 turns, and a year of traffic with and without.

    .venv/bin/python -m benchmarks.retention [--conversations N] [--threads-per-day N] [--out F]

1. Bytes per 1,000 turns. Conversations of 2 to 5 turns (a greeting, an order lookup, a
   shipping estimate, a cancel the customer declines at the confirmation, a goodbye) go
   through the service in-process: the ASGI app with its lifespan, real Postgres, the
   scripted model behind ChatOpenAI. Every conversation table (checkpoints, writes, blobs,
   threads, runs, run logs, transcript archive, leases) is measured with VACUUM FULL before
   each reading, so the figure is what the rows take with their indexes and TOAST: just
   written, once the run logs expire (RUN_LOG_TTL_S, an hour), and once the history window
   has passed (a sweep keeps one checkpoint per turn).
2. A simulated year. The conversations of (1), their logs expired, are the templates:
   every simulated day, `--threads-per-day` copies of them (all their rows, timestamps
   moved to that day) are inserted, and with retention the sweep runs once a simulated
   day (its clock is the simulated one) and the tables get a plain VACUUM every simulated
   week, as autovacuum would. Storage is linear in the number of threads, so the size
   scales with the traffic: the last column gives it per 1,000 turns a day.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from app.api.auth import issue_token
from app.config import Settings
from app.db.migrate import migrate
from app.db.pool import open_pool
from app.db.retention import Policy, sweep
from app.db.transfer import import_dir
from app.main import create_app
from app.runs.repository import RunRepository
from tests.fakellm import ChatRequest, Reply, ScriptedModelServer
from tests.fakellm.policies import find_order_id, summarise_tool_results
from tests.fakes.fixtures import chat_model
from tests.pg import create_fresh_database, drop_database

FIXTURE = Path(__file__).parents[1] / "tests" / "fixtures" / "tau_small"
USER = "noah_brown_6181"
ORDER = "#W2611340"
TABLES = (
    "checkpoints",
    "checkpoint_blobs",
    "checkpoint_writes",
    "threads",
    "runs",
    "run_event_chunks",
    "transcript_archive",
    "thread_leases",
)
TURNS = (
    "hi there",
    f"where is my order {ORDER}?",
    "how much is shipping for 2 kg over 300 km?",
    f"please cancel {ORDER}",  # declined at the confirmation: two runs, one turn
    "thanks, that's all",
)
DAYS = 365
VARIANTS: tuple[tuple[str, Policy | None], ...] = (
    ("no retention", None),
    ("idle threads deleted after 90 days", Policy(thread_ttl_days=90, history_keep_days=None)),
    ("+ history kept 7 days, then one checkpoint per turn", Policy(90, 7)),
)


def shop_assistant(request: ChatRequest) -> Reply:
    """One tool round per question, then an answer quoting the results."""
    if request.pending_tool_results():
        return summarise_tool_results(request)
    text = request.last_user_text().lower()
    if "cancel" in text:
        return Reply.call("cancel_pending_order", order_id=ORDER, reason="no longer needed")
    if "shipping" in text:
        return Reply.call("calc_shipping", distance_km=300, weight_kg=2)
    order_id = find_order_id(text)
    if order_id is not None:
        return Reply.call("get_order_details", order_id=order_id)
    return Reply.say("Hello! I can help with your orders, shipping and returns. " * 2)


async def converse(client: httpx.AsyncClient, headers: dict[str, str], n: int, turns: int) -> None:
    for text in TURNS[:turns]:
        r = await client.post(f"/threads/b{n}/messages", json={"content": text}, headers=headers)
        r.raise_for_status()
        if r.json()["status"] == "interrupted":
            r = await client.post(
                f"/threads/b{n}/resume", json={"decision": "reject"}, headers=headers
            )
            r.raise_for_status()


async def sizes(pool: AsyncConnectionPool[Any], *, full: bool) -> dict[str, int]:
    """Bytes of each conversation table (indexes and TOAST included); VACUUM FULL first
    when `full` (what the rows take), plain VACUUM otherwise (what the disk holds)."""
    async with pool.connection() as conn:
        for table in TABLES:
            await conn.execute(f"VACUUM ({'FULL, ' if full else ''}ANALYZE) {table}")
        cur = await conn.execute(
            """SELECT t AS name, pg_total_relation_size(t::regclass) AS n
               FROM unnest(%s::text[]) AS t""",
            (list(TABLES),),
        )
        return {row["name"]: int(row["n"]) for row in await cur.fetchall()}


async def vacuum_by_hand(pool: AsyncConnectionPool[Any]) -> None:
    """Autovacuum off for the measured tables: only `sizes` vacuums them. An autovacuum
    ANALYZE holds a snapshot that keeps a VACUUM FULL from dropping dead rows (the runs'
    updated versions), which made the figures of one run depend on its timing."""
    async with pool.connection() as conn:
        for table in TABLES:
            await conn.execute(
                f"ALTER TABLE {table} SET (autovacuum_enabled = off,"
                " toast.autovacuum_enabled = off)"
            )


def grown(after: dict[str, int], before: dict[str, int], turns: int) -> dict[str, float]:
    """Bytes per 1,000 turns, per table and in all."""
    per_k = {t: (after[t] - before[t]) * 1000 / turns for t in TABLES}
    return {**per_k, "all": sum(per_k.values())}


@dataclass
class Templates:
    count: int
    turns: list[int]  # per template


async def keep_templates(pool: AsyncConnectionPool[Any], turns: list[int]) -> Templates:
    """The conversation tables' rows as they are now, copied to schema bench_tmpl, with a
    map from template number to thread and its first activity."""
    async with pool.connection() as conn:
        await conn.execute("DROP SCHEMA IF EXISTS bench_tmpl CASCADE; CREATE SCHEMA bench_tmpl")
        for table in TABLES:
            if table != "run_event_chunks":
                await conn.execute(f"CREATE TABLE bench_tmpl.{table} AS SELECT * FROM {table}")
        await conn.execute(
            """CREATE TABLE bench_tmpl.map AS
               SELECT (row_number() OVER (ORDER BY created_at, thread_id) - 1)::int AS k,
                      thread_id, user_id, created_at AS start
               FROM threads"""
        )
    return Templates(len(turns), turns)


async def _clone_sql(pool: AsyncConnectionPool[Any], table: str) -> str:
    """INSERT ... SELECT of `table`'s rows of the templates, for new threads: ids renamed
    per copy, timestamps moved to the day."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT column_name, data_type FROM information_schema.columns
               WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position""",
            (table,),
        )
        columns = await cur.fetchall()
    session = "'y' || %(day)s || '_' || g.i"
    renamed = {
        "thread_id": f"m.user_id || ':' || {session}",
        "session_id": session,
        "run_id": f"t.run_id || ':' || {session}",
    }
    exprs = []
    for c in columns:
        name = c["column_name"]
        if name in renamed:
            exprs.append(renamed[name])
        elif c["data_type"].startswith("timestamp"):
            exprs.append(f"t.{name} + (%(at)s::timestamptz - m.start)")
        else:
            exprs.append(f"t.{name}")
    names = ", ".join(c["column_name"] for c in columns)
    return f"""INSERT INTO {table} ({names})
        SELECT {", ".join(exprs)}
        FROM generate_series(0, %(n)s - 1) AS g(i)
        JOIN bench_tmpl.map m ON m.k = (g.i + %(offset)s) %% %(templates)s
        JOIN bench_tmpl.{table} t ON t.thread_id = m.thread_id"""


async def simulate_year(
    pool: AsyncConnectionPool[Any], templates: Templates, per_day: int, policy: Policy | None
) -> dict[str, Any]:
    async with pool.connection() as conn:
        await conn.execute(f"TRUNCATE {', '.join(TABLES)}")
    # Run log chunks are gone an hour after a run (the templates have none).
    clones = [await _clone_sql(pool, t) for t in TABLES if t != "run_event_chunks"]
    start = datetime.now().astimezone() - timedelta(days=DAYS)
    turns = 0
    began = time.monotonic()
    for day in range(DAYS):
        at = start + timedelta(days=day)
        params = {
            "day": day,
            "at": at,
            "n": per_day,
            "offset": day * per_day,
            "templates": templates.count,
        }
        async with pool.connection() as conn, conn.transaction():
            for sql in clones:
                await conn.execute(sql, params)
        turns += sum(templates.turns[(day * per_day + i) % templates.count] for i in range(per_day))
        if policy is not None:
            await sweep(pool, policy, now=at + timedelta(days=1))
        if day % 7 == 6:
            await sizes(pool, full=False)
    on_disk = sum((await sizes(pool, full=False)).values())
    live = sum((await sizes(pool, full=True)).values())
    return {"turns": turns, "on_disk": on_disk, "live": live, "took": time.monotonic() - began}


async def drive(
    pool: AsyncConnectionPool[Any], server: ScriptedModelServer, settings: Settings, n: int
) -> list[int]:
    """`n` conversations through the service; returns the turns of each."""
    app = create_app(settings, model=chat_model(server, streaming=True, timeout=30))
    token = issue_token(settings.jwt_secret.get_secret_value(), USER, role="customer")
    headers = {"Authorization": f"Bearer {token}"}
    turns = [2 + i % 4 for i in range(n)]  # 2-5 turns, 3.5 on average
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://app", timeout=60
        ) as client,
    ):
        for i, count in enumerate(turns):
            await converse(client, headers, i, count)
    return turns


def mb(n: float) -> str:
    return f"{n / 1e6:,.2f} MB"


STAGES = (
    ("written", "just written"),
    ("logs_expired", "run logs expired (RUN_LOG_TTL_S)"),
    ("pruned", "history window passed (one checkpoint per turn)"),
)


def render(
    per_k: dict[str, dict[str, float]],
    rows: list[tuple[str, dict[str, Any]]],
    per_day: int,
    took: float,
) -> str:
    lines = [
        "## 7. Retention (in-process, `python -m benchmarks.retention`)",
        "",
        "Real Postgres, the service (ASGI app with its lifespan) and ChatOpenAI; scripted model."
        f" Took {took:.0f} s.",
        "",
        "**Database bytes per 1,000 turns** (conversations of 2-5 turns: a greeting, an order",
        "lookup, a shipping estimate, a cancel declined at the confirmation, a goodbye; each",
        "table with its indexes and TOAST, after VACUUM FULL):",
        "",
        "| table | " + " | ".join(label for _, label in STAGES) + " |",
        "|---|" + "---:|" * len(STAGES),
    ]
    for table in (*TABLES, "all"):
        cells = " | ".join(mb(per_k[stage][table]) for stage, _ in STAGES)
        lines.append(f"| {'**all**' if table == 'all' else table} | {cells} |")
    lines += [
        "",
        f"**A simulated year**: {per_day} new conversations a day for {DAYS} days, the sweep",
        "once a simulated day. *On disk*: the tables with a plain VACUUM every simulated week",
        "(freed space is reused, not returned); *live*: after VACUUM FULL. The last column",
        "scales *live* to 1,000 turns a day (storage grows with the number of threads).",
        "",
        "| retention | turns | on disk | live | live at 1,000 turns a day |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in rows:
        per_day_turns = r["turns"] / DAYS
        lines.append(
            f"| {name} | {r['turns']:,} | {mb(r['on_disk'])} | {mb(r['live'])} | "
            f"{r['live'] * 1000 / per_day_turns / 1e9:,.2f} GB |"
        )
    return "\n".join(lines) + "\n"


async def main(conversations: int = 16, threads_per_day: int = 6) -> str:
    url, admin = create_fresh_database("csagent_retention")
    started = time.monotonic()
    try:
        await migrate(url)
        settings = Settings(
            database_url=url,
            retention_sweep_every_s=0,  # the benchmark sweeps, on its own clock
            rate_limit_posts_burst=1_000_000,  # one customer posts every turn back to back
            token_budget_per_day=0,
            log_level="WARNING",
            _env_file=None,
        )
        pool = await open_pool(url, settings, name="retention-bench")
        try:
            await import_dir(pool, FIXTURE, replace=True)
            await vacuum_by_hand(pool)
            empty = await sizes(pool, full=True)
            with ScriptedModelServer(shop_assistant) as server:
                turns = await drive(pool, server, settings, conversations)
            per_k = {"written": grown(await sizes(pool, full=True), empty, sum(turns))}
            await RunRepository(pool).prune_logs(0)  # what an hour does (RUN_LOG_TTL_S)
            per_k["logs_expired"] = grown(await sizes(pool, full=True), empty, sum(turns))
            templates = await keep_templates(pool, turns)
            await sweep(pool, Policy(thread_ttl_days=None, history_keep_days=0))
            per_k["pruned"] = grown(await sizes(pool, full=True), empty, sum(turns))
            rows = []
            for name, policy in VARIANTS:
                rows.append((name, await simulate_year(pool, templates, threads_per_day, policy)))
                print(f"[retention] {name}: {rows[-1][1]}", flush=True)
        finally:
            await pool.close()
    finally:
        drop_database(admin, url)
    return render(per_k, rows, threads_per_day, time.monotonic() - started)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--threads-per-day", type=int, default=6)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    text = asyncio.run(main(args.conversations, args.threads_per_day))
    if args.out is not None:
        args.out.write_text(text)
    print(text)
