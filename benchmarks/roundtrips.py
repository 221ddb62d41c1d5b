"""Statements and round trips to Postgres per turn, counted, for a read and a write turn.

    .venv/bin/python -m benchmarks.roundtrips [--turns 10] [--out F.json] [--md F.md]

A private PostgreSQL cluster (initdb on a free port, as tests/faults does; the machine's
shared server is never restarted) with `pg_stat_statements` preloaded, the demo shop seeded,
the instant scripted model (benchmarks.policy:LookupOrCancel) and our service with the
shipped defaults (write confirmation, rate limits and the token budget on). One customer
at a time, so every statement of a turn is sequential. Three kinds of turn, `--turns` of
each after a warm-up:

- read, first turn of a thread: "where is my order X?" (model -> get_order_details -> model)
- read, a later turn of the same thread, about another order (no tool-cache hit)
- write: "please cancel X" on a new thread (model -> cancel_pending_order, paused for
  confirmation), then `POST /resume {"decision": "approve"}` (the write, then the model)

Counted per turn: statement calls by `pg_stat_statements` (utility statements such as
BEGIN and COMMIT included; an `executemany` counts each row), and round trips: the service
runs under `python -m benchmarks.roundtrips serve ...`, which wraps psycopg's
`AsyncConnection.wait` (nothing under app/ is edited) and counts every request whose
answer a connection waits for (statements sent together in one pipeline share one).
What the service runs on its own meanwhile (the cross-replica poller) is measured
while idle and subtracted. Under a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import psycopg

from benchmarks.client import SSE, OurClient, Pool, read_stream
from benchmarks.procs import JWT_SECRET, PY, Proc, free_port, run_checked

POLICY = "benchmarks.policy:LookupOrCancel"
WARMUP = 6  # turns of each kind first: every statement past DB_PREPARE_THRESHOLD (5)
KINDS = ("read", "read_later", "write")
LABELS = {
    "read": "read turn, first of a thread (lookup: model, tool, model)",
    "read_later": "read turn, later in the thread (another order: no cache hit)",
    "write": "write turn (post, paused for confirmation, resume with approve)",
}
STATEMENTS_SQL = """
SELECT queryid, calls, rows, query FROM pg_stat_statements s
JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = current_database() AND query NOT ILIKE '%%pg_stat_statements%%'
"""
COUNT_FILE_ENV = "BENCH_ROUNDTRIP_FILE"
REALISTIC_PACE = (300.0, 40.0)  # ms to first token, tokens/s (as benchmarks.capacity)


def log(message: str) -> None:
    print(f"[roundtrips {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- inside the service process: `python -m benchmarks.roundtrips serve ...` ---------------


def install_counter(path: Path) -> None:
    """Count the service's round trips to Postgres: every request whose answer a psycopg
    connection waits for. Outside a pipeline each `AsyncConnection.wait` is one (an
    execute, a commit: sent, then its result read); inside one, only the waits that
    end in a Sync or a flush request (`_sync_gen`, `_exit_gen`, `_fetch_gen(flush=True)`)
    are, and the executes queued before them ride along. The count goes to `path` every
    50 ms (a daemon thread), for the benchmark's process to read."""
    import threading

    from psycopg import AsyncConnection
    from psycopg._pipeline_base import BasePipeline
    from psycopg.pq import TransactionStatus

    count = [0]
    original = AsyncConnection.wait
    no_io = {"_set_autocommit_gen", "_set_read_only_gen", "_set_deferrable_gen"}
    syncs = {"_sync_gen", "_exit_gen"}

    def is_round_trip(conn: Any, gen: Any) -> bool:
        name = getattr(gen, "__name__", "")
        frame = getattr(gen, "gi_frame", None)
        owner = frame.f_locals.get("self") if frame is not None else None
        if conn._pipeline is None:
            if name in ("_commit_gen", "_rollback_gen"):  # a no-op outside a transaction
                return bool(conn.pgconn.transaction_status != TransactionStatus.IDLE)
            if name == "_enter_gen" and isinstance(owner, BasePipeline):
                return False  # entering pipeline mode sends nothing
            return name not in no_io
        if name in syncs:
            return True
        return name == "_fetch_gen" and bool(frame and frame.f_locals.get("flush"))

    sites: dict[str, int] = {}
    root = str(Path(__file__).resolve().parents[1] / "app") + "/"

    plumbing = ("/psycopg/", "/psycopg_pool/", "/contextlib.py", "/asyncio/")

    def site(name: str) -> str:
        """The innermost frame of app/ that led here (else of the library that did, e.g.
        LangGraph's store), and what psycopg did."""
        frame: Any = sys._getframe(2)
        library = None
        while frame is not None and not frame.f_code.co_filename.startswith(root):
            path = frame.f_code.co_filename
            if library is None and not any(p in path for p in plumbing):
                library = frame
            frame = frame.f_back
        if frame is None or frame.f_code.co_filename.endswith("/cli.py"):
            frame = library
        if frame is None:
            return f"(outside app/) ({name})"
        where = frame.f_code.co_filename
        where = "app/" + where.removeprefix(root) if where.startswith(root) else where
        where = where.rpartition("site-packages/")[2]
        return f"{where}:{frame.f_lineno} {frame.f_code.co_name} ({name})"

    async def wait(self: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
        if is_round_trip(self, gen):
            count[0] += 1
            key = site(getattr(gen, "__name__", "?"))
            sites[key] = sites.get(key, 0) + 1
        return await original(self, gen, *args, **kwargs)

    AsyncConnection.wait = wait  # type: ignore[method-assign]

    def publish() -> None:
        last = -1
        while True:
            if count[0] != last:
                last = count[0]
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps({"count": last, "sites": dict(sites)}))
                tmp.replace(path)
            time.sleep(0.05)

    threading.Thread(target=publish, daemon=True).start()


def serve(argv: Sequence[str]) -> None:
    import os

    install_counter(Path(os.environ[COUNT_FILE_ENV]))
    from app.cli import main as app_main

    app_main(list(argv))


class Counter:
    """Snapshots of pg_stat_statements (one connection) and of the service's round trips."""

    def __init__(self, url: str, count_file: Path) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.count_file = count_file

    def reset(self) -> None:
        self.conn.execute("SELECT pg_stat_statements_reset()")

    def snapshot(self) -> tuple[dict[int, tuple[int, str]], int]:
        rows = self.conn.execute(STATEMENTS_SQL).fetchall()
        statements = {int(q): (int(c), " ".join(str(t).split())) for q, c, _, t in rows}
        published = json.loads(self.count_file.read_text())
        self.sites = {str(k): int(v) for k, v in published["sites"].items()}
        return statements, int(published["count"])


def shorten(query: str, width: int = 110) -> str:
    return query if len(query) <= width else query[: width - 3] + "..."


class Session:
    def __init__(self, url: str, turns: int) -> None:
        self.http = Pool(url, 4)
        self.client = OurClient(self.http, JWT_SECRET)
        self.turns = turns

    async def post(self, user: str, session: str, text: str) -> str:
        result = await self.client.turn(user, session, text)
        if result.error and not result.error.startswith("status interrupted"):
            raise RuntimeError(f"turn failed: {result.error}")
        return "interrupted" if result.error else "completed"

    async def resume(self, user: str, session: str) -> None:
        done: dict[str, Any] = {}

        def on_event(sse: SSE) -> None:
            if sse.event == "done":
                done.update(json.loads(sse.data))

        headers = {"Authorization": f"Bearer {self.client._token(user)}"}
        _, _, error = await read_stream(
            self.http, f"/threads/{session}/resume", {"decision": "approve"}, headers, on_event
        )
        if error or done.get("status") != "completed":
            raise RuntimeError(f"resume failed: {error or done.get('status')}")

    async def turn(self, kind: str, target: tuple[str, str, str], session: str) -> None:
        user, order, other = target
        if kind == "read":
            assert await self.post(user, session, f"Hi, where is my order {order}?") == "completed"
        elif kind == "read_later":
            text = f"And what is the status of {other}?"
            assert await self.post(user, session, text) == "completed"
        else:
            status = await self.post(user, session, f"Please cancel my order {order}.")
            if status != "interrupted":
                raise RuntimeError("the write turn was not paused for confirmation")
            await self.resume(user, session)


def targets(url: str) -> dict[str, list[tuple[str, str, str]]]:
    """Customers for each kind: two orders each for the reads; a pending order for writes.
    Every turn has its own customer (the shipped rate limits count per customer)."""
    with psycopg.connect(url) as conn:
        two = conn.execute(
            """SELECT customer_id, min(id), max(id) FROM orders GROUP BY customer_id
               HAVING count(*) >= 2 ORDER BY customer_id"""
        ).fetchall()
        pending = conn.execute(
            """SELECT DISTINCT ON (customer_id) customer_id, id, id FROM orders
               WHERE status = 'pending' ORDER BY customer_id, id DESC"""
        ).fetchall()
    reads = [(str(a), str(b), str(c)) for a, b, c in two]
    taken = {r[0] for r in reads[: len(reads) // 2]}
    writes = [(str(a), str(b), str(c)) for a, b, c in pending if a not in taken]
    return {"read": reads[: len(reads) // 2], "write": writes}


def cpu_s(pid: int | None) -> float:
    """The service process's CPU seconds so far (0 when unknown)."""
    if pid is None:
        return 0.0
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def measure(
    service_url: str, counter: Counter, turns: int, warmup: int, pid: int | None = None
) -> dict[str, Any]:
    session = Session(service_url, turns)
    pools = targets(counter.conn.info.dsn)
    reads, writes = pools["read"], pools["write"]
    if len(reads) < warmup + turns or len(writes) < warmup + turns:
        raise SystemExit("not enough customers for the turns asked for")
    for i in range(warmup):  # prepared statements, caches, the pool's connections
        await session.turn("read", reads[-1 - i], f"warm-r{i}")
        await session.turn("read_later", reads[-1 - i], f"warm-r{i}")
        await session.turn("write", writes[-1 - i], f"warm-w{i}")
    await asyncio.sleep(1.0)

    # The service's own background statements, per second, while no turn runs.
    counter.reset()
    idle_s = 4.0
    before = counter.snapshot()
    sites_before = dict(counter.sites)
    idle_cpu0 = cpu_s(pid)
    await asyncio.sleep(idle_s)
    idle_cpu = cpu_s(pid) - idle_cpu0
    after = counter.snapshot()
    background_sites = {k: v - sites_before.get(k, 0) for k, v in counter.sites.items()}
    background = {q: (c, t) for q, (c, t) in after[0].items()}
    background_trips = after[1] - before[1]

    results: dict[str, Any] = {
        "turns": turns,
        "background": {
            "seconds": idle_s,
            "statements": sum(c for c, _ in background.values()),
            "trips": background_trips,
            "top": sorted(((c, t) for c, t in background.values()), reverse=True)[:5],
        },
        "kinds": {},
    }
    for kind in KINDS:
        counter.reset()
        _, trips0 = counter.snapshot()
        sites0 = dict(counter.sites)
        cpu0 = cpu_s(pid)
        started = time.monotonic()
        for i in range(turns):
            user_pool = writes if kind == "write" else reads
            name = f"{kind[0]}{i}" if kind != "read_later" else f"r{i}"
            await session.turn(kind, user_pool[i], name)
        await asyncio.sleep(0.5)  # whatever a turn finishes after its `done` event
        elapsed = time.monotonic() - started
        cpu = cpu_s(pid) - cpu0 - idle_cpu * (elapsed / idle_s)
        statements, trips1 = counter.snapshot()
        sites = {
            k: (v - sites0.get(k, 0) - background_sites.get(k, 0) * (elapsed / idle_s)) / turns
            for k, v in counter.sites.items()
        }
        scale = elapsed / idle_s
        rows: list[dict[str, Any]] = []
        for q, (calls, text) in statements.items():
            bg = background.get(q, (0, ""))[0] * scale
            net = max(calls - bg, 0.0)
            if net > 0:
                rows.append({"calls_per_turn": net / turns, "query": text})
        rows.sort(key=lambda r: -float(r["calls_per_turn"]))
        trips = trips1 - trips0 - background_trips * scale
        results["kinds"][kind] = {
            "label": LABELS[kind],
            "statements_per_turn": sum(float(r["calls_per_turn"]) for r in rows),
            "round_trips_per_turn": max(trips, 0.0) / turns,
            # one customer at a time; the counting wrapper's own work included
            "cpu_ms_per_turn": 1000 * max(cpu, 0.0) / turns if pid is not None else None,
            "elapsed_s": elapsed,
            "statements": rows,
            "round_trip_sites": [
                [k, v] for k, v in sorted(sites.items(), key=lambda kv: -kv[1]) if v > 0.05
            ],
        }
        log(
            f"{kind:10s} {results['kinds'][kind]['statements_per_turn']:.1f} statements,"
            f" {results['kinds'][kind]['round_trips_per_turn']:.1f} round trips per turn"
        )
    await session.http.aclose()
    return results


def render(r: dict[str, Any], top: int = 12) -> str:
    kinds = r["kinds"]
    lines = [
        f"{r['turns']} turns of each kind, one customer at a time, our service with the shipped"
        " defaults on a private Postgres with `pg_stat_statements` (`python -m"
        " benchmarks.roundtrips`). *Statements* counts every statement the server ran"
        " (BEGIN/COMMIT included; an `executemany` counts once per row); *round trips* counts"
        " the requests whose answer a connection of the service waited for (psycopg's"
        " `wait`, wrapped), so statements pipelined together count once. The service's"
        " own background work while idle"
        f" ({r['background']['statements'] / r['background']['seconds']:.1f} statements/s)"
        " is subtracted.",
        "",
        "| turn | statements/turn | round trips/turn | service CPU ms/turn |",
        "|---|---:|---:|---:|",
    ]
    for kind in kinds.values():
        cpu = kind.get("cpu_ms_per_turn")
        lines.append(
            f"| {kind['label']} | {kind['statements_per_turn']:.1f}"
            f" | {kind['round_trips_per_turn']:.1f} | {'-' if cpu is None else f'{cpu:.1f}'} |"
        )
    lines.append("")
    for kind in kinds.values():
        lines += [
            f"Top statements, {kind['label']}:",
            "",
            "| calls/turn | statement |",
            "|---:|---|",
        ]
        for row in kind["statements"][:top]:
            query = shorten(row["query"]).replace("|", "\\|")
            lines.append(f"| {row['calls_per_turn']:.1f} | `{query}` |")
        rest = kind["statements"][top:]
        if rest:
            more = sum(float(x["calls_per_turn"]) for x in rest)
            lines.append(f"| {more:.1f} | ({len(rest)} other statements) |")
        lines += [
            "",
            f"Round trips by where in app/ they start, {kind['label']}:",
            "",
            "| per turn | call site (psycopg step) |",
            "|---:|---|",
        ]
        for where, per_turn in kind.get("round_trip_sites", []):
            lines.append(f"| {float(per_turn):.1f} | `{where}` |")
        rest = []
        if rest:
            more = sum(float(x["calls_per_turn"]) for x in rest)
            lines.append(f"| {more:.1f} | ({len(rest)} other statements) |")
        lines.append("")
    return "\n".join(lines)


def run(
    turns: int, warmup: int, out: Path, pace: tuple[float, float] | None = None
) -> dict[str, Any]:
    from tests.faults.procs import PrivatePostgres

    pg = PrivatePostgres(dbname="csagent_roundtrips")
    procs: list[Proc] = []
    try:
        with (pg.datadir / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                "shared_preload_libraries = 'pg_stat_statements'\n"
                "pg_stat_statements.track_utility = on\n"
                "pg_stat_statements.max = 5000\n"
            )
        pg.start()
        log(f"private cluster on :{pg.port}; seeding")
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        env = {"DATABASE_URL": pg.url, "LOG_LEVEL": "WARNING"}
        run_checked([PY, "-m", "app", "seed"], env, out / "seed.log")
        model_port = free_port()
        model_url = f"http://127.0.0.1:{model_port}/v1"
        argv = [PY, "-m", "tests.fakellm", "--port", str(model_port), "--policy", POLICY]
        argv += ["--ttft-ms", str(pace[0]), "--tps", str(pace[1])] if pace else []
        procs.append(
            Proc("model", argv, {}, out / "model.log", ready_url=f"{model_url}/models").start()
        )
        port = free_port()
        service_url = f"http://127.0.0.1:{port}"
        service_env = {
            "DATABASE_URL": pg.url,
            "OPENAI_BASE_URL": model_url,
            "OPENAI_API_KEY": "x",
            "JWT_SECRET": JWT_SECRET,
            "LOG_LEVEL": "WARNING",
            "WEB_WORKERS": "1",  # the counting wrapper lives in this one process
        }
        count_file = out / "roundtrips.count"
        count_file.write_text('{"count": 0, "sites": {}}')
        service_env[COUNT_FILE_ENV] = str(count_file)
        argv = [PY, "-m", "benchmarks.roundtrips", "serve", "--no-seed", "--port", str(port)]
        procs.append(
            Proc(
                "ours", argv, service_env, out / "ours.log", ready_url=f"{service_url}/healthz"
            ).start()
        )
        counter = Counter(pg.url, count_file)
        try:
            pid = procs[-1].pid
            return asyncio.run(measure(service_url, counter, turns, warmup, pid))
        finally:
            counter.conn.close()
    finally:
        for proc in reversed(procs):
            proc.stop()
        pg.cleanup()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.roundtrips", description=__doc__)
    parser.add_argument("--turns", type=int, default=10, help="measured turns of each kind")
    parser.add_argument(
        "--warmup",
        type=int,
        default=WARMUP,
        help="warm-up turns of each kind (past psycopg's prepare threshold, 5)",
    )
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    parser.add_argument("--md", type=Path, help="write the markdown table here too")
    parser.add_argument("--logs", type=Path, help="folder for the processes' logs")
    parser.add_argument(
        "--paced",
        action="store_true",
        help="the model at the realistic pace (0.3 s to first token, 40 tokens/s) instead of"
        " instant: a turn's CPU with one stream chunk per token",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:  # the service itself, counting its round trips
        serve(argv)
        return None
    args = parse_args(argv)
    logs = args.logs or Path(tempfile.mkdtemp(prefix="roundtrips-"))
    logs.mkdir(parents=True, exist_ok=True)
    results = run(args.turns, args.warmup, logs, REALISTIC_PACE if args.paced else None)
    text = render(results)
    print(text)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    if args.md:
        args.md.write_text(text)
    return results


if __name__ == "__main__":
    main()
