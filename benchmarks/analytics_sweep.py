"""How long the outcome sweep takes for N conversations (issue 29 asks for 10,000).

    .venv/bin/python -m benchmarks.analytics_sweep [--threads 10000] [--batch-size 100]

Fills a fresh database of the machine's Postgres with N finished conversations written as
the service writes them, straight into the tables (threads, runs with their message views,
usage and time to first token, run event chunks, write records, handoffs on the lease row),
then times one sweep computing every outcome, a second sweep (nothing due), and the
summary over them. The mix, per conversation of 1-4 turns: order lookups, a confirmed or
declined cancellation, a tool failing twice, a handoff, a failed run. Prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from app.agent.tool_exec import DECLINED
from app.analytics.report import summary
from app.analytics.sweep import SweepPolicy, sweep
from app.config import Settings
from app.db.migrate import migrate
from app.db.pool import open_pool
from tests.pg import create_fresh_database, drop_database

ORDER = json.dumps(
    {
        "order_id": "#W2611340",
        "status": "pending",
        "items": [
            {
                "name": "Water Bottle",
                "options": {"capacity": "750ml", "color": "blue"},
                "price": 47.8,
            }
        ]
        * 3,
        "address": {"address1": "123 Main St", "city": "Springfield", "zip": "12345"},
        "payment_history": [{"transaction_type": "payment", "amount": 143.4}],
    }
)
NOT_FOUND = '{"error": "order not found", "code": "not_found"}'


def _id() -> str:
    return uuid.uuid4().hex


def customer(text: str) -> dict[str, Any]:
    return {"id": _id(), "role": "user", "author": "customer", "content": text}


def agent(text: str, calls: list[tuple[str, dict[str, Any]]] | None = None) -> dict[str, Any]:
    view: dict[str, Any] = {"id": _id(), "role": "assistant", "author": "agent", "content": text}
    if calls:
        view["tool_calls"] = [{"id": _id(), "name": n, "args": a} for n, a in calls]
    return view


def tool(name: str, content: str, status: str = "success") -> dict[str, Any]:
    return {"id": _id(), "role": "tool", "content": content, "name": name, "status": status,
            "tool_call_id": _id()}  # fmt: skip


def result(messages: list[dict[str, Any]], status: str, **extra: Any) -> dict[str, Any]:
    usage = {"input_tokens": random.randint(1500, 4000), "output_tokens": random.randint(40, 300)}
    return {"run_id": _id(), "messages": messages, "status": status, "usage": usage,
            "checkpoint_id": _id(), **extra}  # fmt: skip


def lookup_turn(i: int) -> list[tuple[str, dict[str, Any]]]:
    call = ("get_order_details", {"order_id": "#W2611340"})
    return [
        (
            "completed",
            result(
                [
                    customer(f"where is my order #W2611340? ({i})"),
                    agent("", [call]),
                    tool("get_order_details", ORDER),
                    agent("Your order #W2611340 is pending; it ships within two days."),
                ],
                "completed",
            ),
        )
    ]


def write_turn(approve: bool) -> list[tuple[str, dict[str, Any]]]:
    call = ("cancel_pending_order", {"order_id": "#W2611340", "reason": "ordered by mistake"})
    asked = result(
        [customer("please cancel it"), agent("", [call])],
        "interrupted",
        pending=[{"name": "cancel_pending_order", "summary": "Cancel order #W2611340"}],
    )
    answer = "It is cancelled; the refund takes 5-7 days." if approve else "I left it as it is."
    outcome = "Order #W2611340 is cancelled." if approve else DECLINED
    done = result([tool("cancel_pending_order", outcome), agent(answer)], "completed")
    return [("interrupted", asked), ("completed", done)]


def failing_turn() -> list[tuple[str, dict[str, Any]]]:
    call = ("get_order_details", {"order_id": "#W0000001"})
    messages = [customer("where is order #W0000001?")]
    for _ in range(2):
        messages += [agent("", [call]), tool("get_order_details", NOT_FOUND, "error")]
    messages.append(agent("I could not find that order."))
    return [("completed", result(messages, "completed"))]


def handoff_turn() -> list[tuple[str, dict[str, Any]]]:
    call = ("transfer_to_human_agents", {"summary": "wants a person"})
    asked = result(
        [customer("let me talk to a human"), agent("", [call])],
        "interrupted",
        pending=[{"name": "transfer_to_human_agents", "summary": "Transfer"}],
    )
    answer = [tool("transfer_to_human_agents", "Transferred."), agent("A colleague is coming.")]
    done = result(answer, "completed")
    return [("interrupted", asked), ("completed", done)]


def events(run_id: str, status: str) -> list[Any]:
    """A run's log as its chunk stores it: [seq, event, data]."""
    log: list[Any] = [[0, "run", {"run_id": run_id}]]
    log += [[n, "token", {"text": "word "}] for n in range(1, 25)]
    if status == "failed":
        log.append([25, "error", {"code": "model_unavailable", "message": "…"}])
    log.append([len(log), "done", {"status": status}])
    return log


def conversation(i: int) -> tuple[list[tuple[str, dict[str, Any]]], bool, list[tuple[str, bool]]]:
    """Its runs (status, result), whether it was handed off, and its write records."""
    turns: list[tuple[str, dict[str, Any]]] = []
    writes: list[tuple[str, bool]] = []
    handed = False
    for _ in range(random.choice((1, 1, 2, 2, 3, 4))):
        kind = random.random()
        if kind < 0.65:
            turns += lookup_turn(i)
        elif kind < 0.80:
            approve = random.random() < 0.7
            turns += write_turn(approve)
            if approve:
                writes.append(("cancel_pending_order", random.random() < 0.9))
        elif kind < 0.92:
            turns += failing_turn()
        elif kind < 0.97:
            turns += handoff_turn()
            writes.append(("transfer_to_human_agents", True))
            handed = True
            break
        else:
            turns.append(("failed", result([], "failed")))
            break
    return turns, handed, writes


async def fill(pool: AsyncConnectionPool[Any], n: int) -> dict[str, int]:
    now = datetime.now(UTC)
    async with pool.connection() as conn, conn.cursor() as cur:
        runs_rows: list[tuple[Any, ...]] = []
        chunk_rows: list[tuple[Any, ...]] = []
        write_rows: list[tuple[Any, ...]] = []
        lease_rows: list[tuple[Any, ...]] = []
        thread_rows: list[tuple[Any, ...]] = []
        for i in range(n):
            user = f"user_{i % 2000}"
            thread_id = f"{user}:s{i}"
            started = now - timedelta(days=random.uniform(0.1, 7), hours=1)
            at = started
            turns, handed, writes = conversation(i)
            for status, body in turns:
                run_id = body["run_id"]
                took = timedelta(seconds=random.uniform(1, 12))
                ttft = random.randint(300, 2500) if status != "failed" else None
                runs_rows.append((run_id, thread_id, status, json.dumps(body), at, at + took, ttft))
                chunk_rows.append((run_id, 0, 30, json.dumps(events(run_id, status))))
                at += took + timedelta(seconds=random.uniform(5, 90))
            for name, ok in writes:
                write_rows.append((_id(), thread_id, user, name, "{}", ok, "done", at))
            if handed:
                lease_rows.append((thread_id, 1, "bench", at, "queued", "handed off by the agent"))
            thread_rows.append((thread_id, user, f"s{i}", started, at))
        for table, columns, rows in (
            ("threads", "thread_id, user_id, session_id, created_at, updated_at", thread_rows),
            ("runs", "run_id, thread_id, status, result, created_at, finished_at, ttft_ms",
             runs_rows),
            ("run_event_chunks", "run_id, first_seq, last_seq, events", chunk_rows),
            ("tool_executions",
             "idempotency_key, thread_id, user_id, tool_name, arguments, ok, outcome, created_at",
             write_rows),
            ("thread_leases",
             "thread_id, generation, owner, expires_at, control, control_reason", lease_rows),
        ):  # fmt: skip
            async with cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    await copy.write_row(row)
        counts = dict(
            threads=len(thread_rows),
            runs=len(runs_rows),
            tool_executions=len(write_rows),
            handoffs=len(lease_rows),
        )
        await cur.execute("ANALYZE")
    return counts


async def main(threads: int, batch_size: int) -> None:
    random.seed(29)
    url, admin = create_fresh_database("csagent_bench")
    try:
        await migrate(url)
        settings = Settings(database_url=url, outcomes_batch_size=batch_size, _env_file=None)
        pool = await open_pool(url, settings, name="analytics-bench")
        try:
            started = time.perf_counter()
            counts = await fill(pool, threads)
            filled_s = time.perf_counter() - started
            policy = SweepPolicy.from_settings(settings, idle_min=30)
            started, cpu = time.perf_counter(), time.process_time()
            swept = await sweep(pool, policy)
            sweep_s = time.perf_counter() - started
            sweep_cpu_s = time.process_time() - cpu  # this process's: the rest is Postgres
            started = time.perf_counter()
            again = await sweep(pool, policy)
            again_s = time.perf_counter() - started
            end = datetime.now(UTC)
            started = time.perf_counter()
            report = await summary(pool, end - timedelta(days=8), end, "day")
            summary_s = time.perf_counter() - started
        finally:
            await pool.close()
    finally:
        drop_database(admin, url)
    assert swept is not None and again is not None
    assert report["totals"]["conversations"] == swept.outcomes
    print(f"filled in {filled_s:.1f} s: " + ", ".join(f"{v:,} {k}" for k, v in counts.items()))
    step = f"step ({threads:,} conversations, batches of {batch_size})"
    print(f"\n| {step} | seconds | per conversation |")
    print("|---|---:|---:|")
    rows = (
        (f"sweep: {swept.outcomes:,} outcomes in {swept.batches} batches", sweep_s),
        (f"sweep again: {again.outcomes} due", again_s),
        ("summary, 8 days by day", summary_s),
    )
    for label, seconds in rows:
        print(f"| {label} | {seconds:.2f} | {seconds / threads * 1000:.2f} ms |")
    print(f"\nthe sweep's own CPU: {sweep_cpu_s:.2f} s of {sweep_s:.2f} s")
    totals = report["totals"]
    print(
        f"\nresolved {totals['resolution_rate']:.0%}, handed off {totals['handoff_rate']:.0%}, "
        f"with a tool error {totals['tool_error_rate']:.0%}, "
        f"TTFT p50 {totals['ttft_p50_ms']} ms / p95 {totals['ttft_p95_ms']} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.threads, args.batch_size))
