"""The load generator: a separate process that talks to a service over real HTTP.

    python -m benchmarks.loadgen load --target ours --url URL --customers 32 ...
    python -m benchmarks.loadgen long --url URL --database-url DSN --levels 4,40,400 ...

Each simulated customer holds conversations of `--turns` order-lookup turns on its own
thread and reads every SSE stream to its end. Results go to `--out` as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import eventloop
from benchmarks.client import OurClient, PeerClient, TurnResult, http_client

Pair = tuple[str, str]  # (user_id, order_id)
Triple = tuple[str, str, str]  # (user_id, order_id, another order of the same customer)
TEXTS = (
    "Hi, where is my order {order}?",
    "Could you check order {order} again for me?",
    "One more time please: what is the status of {order}?",
)


def question(turn: int, order_id: str) -> str:
    return TEXTS[turn % len(TEXTS)].format(order=order_id)


def make_client(target: str, url: str, connections: int, secret: str) -> Any:
    http = http_client(url, connections)
    return OurClient(http, secret) if target == "ours" else PeerClient(http)


TurnFn = Callable[[str, str, str], Awaitable[dict[str, Any]]]


def read_pairs(path: str) -> list[Pair]:
    return [(str(u), str(o)) for u, o in json.loads(Path(path).read_text())]


async def customers(
    pairs: Sequence[Pair], count: int, turns: int, total: int, tag: str, turn: TurnFn
) -> list[dict[str, Any]]:
    """`count` concurrent customers; each runs conversations of `turns` turns until `total`
    turns have been started overall. `turn(user_id, session, text)` returns one result row."""
    results: list[dict[str, Any]] = []
    started = 0

    async def customer(index: int) -> None:
        nonlocal started
        user_id, order_id = pairs[index % len(pairs)]
        conversation = 0
        while started < total:
            session = f"{tag}-c{index}-n{conversation}"
            for k in range(turns):
                if started >= total:
                    return
                started += 1
                row = await turn(user_id, session, question(k, order_id))
                row.update(customer=index, conversation=conversation, turn=k)
                results.append(row)
            conversation += 1

    await asyncio.gather(*(customer(i) for i in range(count)))
    return results


async def run_load(args: argparse.Namespace, pairs: Sequence[Pair]) -> dict[str, Any]:
    client = make_client(args.target, args.url, args.customers, args.secret)

    async def turn(user_id: str, session: str, text: str) -> dict[str, Any]:
        result: TurnResult = await client.turn(user_id, session, text)
        return result.as_dict()

    t0 = time.time()
    results = await customers(pairs, args.customers, args.turns, args.total_turns, args.tag, turn)
    elapsed = time.time() - t0
    await client.http.aclose()
    return {"started": t0, "elapsed_s": elapsed, "turns": results}


# --- long threads ------------------------------------------------------------------------

BYTES_SQL = """
SELECT
  (SELECT count(*) FROM checkpoints WHERE thread_id = %(t)s) AS checkpoints_rows,
  (SELECT coalesce(sum(octet_length(checkpoint::text) + octet_length(metadata::text)), 0)
     FROM checkpoints WHERE thread_id = %(t)s) AS checkpoints_bytes,
  (SELECT count(*) FROM checkpoint_blobs WHERE thread_id = %(t)s) AS blobs_rows,
  (SELECT coalesce(sum(octet_length(blob)), 0)
     FROM checkpoint_blobs WHERE thread_id = %(t)s) AS blobs_bytes,
  (SELECT count(*) FROM checkpoint_writes WHERE thread_id = %(t)s) AS writes_rows,
  (SELECT coalesce(sum(octet_length(blob)), 0)
     FROM checkpoint_writes WHERE thread_id = %(t)s) AS writes_bytes
"""
DB_STATS_SQL = """
SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted, tup_fetched
FROM pg_stat_database WHERE datname = current_database()
"""
TABLE_STATS_SQL = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables
WHERE relname IN ('checkpoints', 'checkpoint_blobs', 'checkpoint_writes', 'runs', 'threads',
                  'tool_executions', 'audit_log')
"""
# Backends publish their statistics when idle, at most every second and at the latest
# after PGSTAT_IDLE_INTERVAL (10 s): wait that long before each read of pg_stat_*.
STATS_SETTLE_S = 11.5


async def read_stats(conn: Any) -> dict[str, Any]:
    await asyncio.sleep(STATS_SETTLE_S)
    cur = await conn.execute(DB_STATS_SQL)
    db = dict(await cur.fetchone())
    cur = await conn.execute(TABLE_STATS_SQL)
    tables = {r["relname"]: dict(r) for r in await cur.fetchall()}
    return {"db": db, "tables": tables}


def stats_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    db = {k: after["db"][k] - before["db"][k] for k in before["db"]}
    tables = {
        name: {
            k: after["tables"][name][k] - before["tables"].get(name, {}).get(k, 0)
            for k in ("n_tup_ins", "n_tup_upd", "n_tup_del")
        }
        for name in after["tables"]
    }
    return {"db": db, "tables": tables}


async def thread_bytes(conn: Any, thread_id: str) -> dict[str, int]:
    cur = await conn.execute(BYTES_SQL, {"t": thread_id})
    return {k: int(v) for k, v in (await cur.fetchone()).items()}


SECOND_ORDER_SQL = """
SELECT id FROM orders WHERE customer_id = %s AND id <> %s ORDER BY id LIMIT 1
"""


async def measured_pairs(conn: Any, pairs: Sequence[Pair], count: int) -> list[Triple]:
    """(customer, the order their history asks about, another order of theirs) for the first
    `count` customers with two orders. The measured turn asks about the other order: a
    lookup no earlier turn made, so no level is served from the conversation's tool cache.
    (Asked about the history's order, the 4-message level would be a cache hit and the 40-
    and 400-message levels misses: an entry ages out after 5 turns, and turns 11 and 101
    fall on an expiry. That compared a turn without a tool query to turns with one.)"""
    found: list[Triple] = []
    for user_id, order_id in pairs:
        cur = await conn.execute(SECOND_ORDER_SQL, (user_id, order_id))
        row = await cur.fetchone()
        if row is not None:
            found.append((user_id, order_id, row["id"]))
        if len(found) == count:
            return found
    raise SystemExit("not enough customers with two orders for the threads of a level")


async def run_long(args: argparse.Namespace, pairs: Sequence[Pair]) -> dict[str, Any]:
    import psycopg
    from psycopg.rows import dict_row

    levels = [int(x) for x in args.levels.split(",")]
    per_level = args.threads_per_level
    conn = await psycopg.AsyncConnection.connect(
        args.database_url, autocommit=True, row_factory=dict_row
    )
    chosen = await measured_pairs(conn, pairs, per_level)
    client = make_client("ours", args.url, per_level * len(levels), args.secret)
    # Paired: customer k has one thread at every level, built from the same questions about
    # the same order, and the measured turns ask the same question in each, so the levels
    # differ in their history's length only.
    threads: dict[int, list[tuple[str, str, str, str]]] = {}
    for level in levels:
        threads[level] = []
        for k, (user_id, order_id, other_order) in enumerate(chosen):
            threads[level].append((user_id, order_id, other_order, f"{args.tag}-L{level}-{k}"))

    gate = asyncio.Semaphore(args.build_concurrency)
    build_errors = 0

    async def build(level: int, user_id: str, order_id: str, _: str, session: str) -> None:
        nonlocal build_errors
        async with gate:
            for turn in range(level // 4):  # an order-lookup turn adds 4 messages
                result = await client.turn(user_id, session, question(turn, order_id))
                build_errors += not result.ok

    t0 = time.time()
    await asyncio.gather(*(build(level, *t) for level, ts in threads.items() for t in ts))
    build_s = time.time() - t0

    measured: dict[str, Any] = {}
    async with conn:
        history: dict[str, int] = {}
        for ts in threads.values():
            for user_id, _, _, session in ts:
                cur = await conn.execute(
                    "SELECT message_count FROM threads WHERE thread_id = %s",
                    (f"{user_id}:{session}",),
                )
                row = await cur.fetchone()
                history[session] = int(row["message_count"]) if row else 0
        # Latency: one turn per thread with the levels interleaved, so that the machine
        # speeding up or slowing down during the run touches every level alike.
        turns: dict[int, list[dict[str, Any]]] = {level: [] for level in threads}
        for i in range(per_level):
            for level, ts in threads.items():
                user_id, _, other_order, session = ts[i]
                thread_id = f"{user_id}:{session}"
                before = await thread_bytes(conn, thread_id)
                result: TurnResult = await client.turn(
                    user_id, session, question(level // 4, other_order)
                )
                after = await thread_bytes(conn, thread_id)
                row = result.as_dict()
                row["history_messages"] = history[session]
                row["written"] = {k: after[k] - before[k] for k in after}
                turns[level].append(row)
        # SQL counts: pg_stat_* deltas need each level on its own, so one more turn per
        # thread, level by level, between reads.
        previous = await read_stats(conn) if args.pg_stats else None
        for level, ts in threads.items():
            delta = None
            if previous is not None:
                # the other order again: a cache hit at every level
                for user_id, _, other_order, session in ts:
                    await client.turn(user_id, session, question(level // 4 + 1, other_order))
                current = await read_stats(conn)
                delta = stats_delta(previous, current)
                delta["own_statements"] = 2  # the previous read's two statements
                previous = current
            measured[str(level)] = {
                "turns": turns[level],
                "stats": delta,
                "measured_turns": len(ts),
            }
    await client.http.aclose()
    return {"build_s": build_s, "build_errors": build_errors, "levels": measured}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loadgen")
    sub = parser.add_subparsers(dest="mode", required=True)
    for name in ("load", "long"):
        p = sub.add_parser(name)
        p.add_argument("--url", required=True)
        p.add_argument("--pairs", required=True, help="JSON file: [[user_id, order_id], ...]")
        p.add_argument("--secret", default="", help="JWT secret of our service")
        p.add_argument("--tag", default="b", help="prefix of session ids (unique per run)")
        p.add_argument("--out", required=True)
    load = sub.choices["load"]
    load.add_argument("--target", choices=["ours", "peer"], required=True)
    load.add_argument("--customers", type=int, required=True)
    load.add_argument("--turns", type=int, default=3, help="turns per conversation")
    load.add_argument("--total-turns", type=int, required=True)
    long = sub.choices["long"]
    long.add_argument("--database-url", required=True)
    long.add_argument("--levels", default="4,40,400")
    long.add_argument("--threads-per-level", type=int, default=4)
    long.add_argument("--build-concurrency", type=int, default=8)
    long.add_argument(
        "--no-pg-stats",
        dest="pg_stats",
        action="store_false",
        help="skip the pg_stat_* statement counts (each read waits ~12 s)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    pairs = read_pairs(args.pairs)
    runner = run_load if args.mode == "load" else run_long
    result = eventloop.run(runner(args, pairs))
    result["cpu_s"] = time.process_time()
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
