"""Postgres's share of a turn: CPU, statements, WAL bytes and non-HOT updates per read turn
and per write turn, for our service and the tutorial peer (benchmarks/baseline).

Part of the `scale` section (benchmarks/scale_section.py, which starts the private cluster:
`pg_stat_statements` preloaded, `track_io_timing` on). One system at a time on a database of
its own (a copy of the seeded shop), so the cluster's CPU is that system's:

- read turn: "where is my order X?" on a new thread (model -> get_order_details -> model);
- write turn: "please cancel X" (a pending order) on a new thread, the write done in the
  turn (model -> cancel_pending_order -> model): our WRITE_CONFIRMATION is off, as the
  peer has no confirmation step;
- later turn: the read turn as the fourth of its conversation (three read turns on the
  thread before the batch, not measured): what a conversation's turns cost once it is
  going, where a first turn pays for opening the thread.

Each batch is `turns` turns, `concurrency` at a time. Measured from its start to 0.5 s after
its last turn: the CPU of every process of the cluster (/proc/<pid>/schedstat, in ns), the
backends that exited included (the postmaster's reaped children's utime + stime), so
autovacuum and the checkpointer
count when they run meanwhile; `pg_stat_statements` (calls, total time) of the database;
the WAL written (`pg_current_wal_lsn`). Then, after a quiet wait so every backend has
flushed its table counters (Postgres flushes a backend's pending statistics within 10 s of
it going idle): `n_tup_upd - n_tup_hot_upd` and `n_tup_ins` per table. What the system does
while idle (its background loops, the snapshots' own statements) is measured the same way
over an idle window and subtracted in proportion to each measurement's length.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psutil  # type: ignore[import-untyped]
import psycopg

from benchmarks.client import OurClient, PeerClient, Pool, TurnResult

SETTLE_S = 0.5  # the last turns' commits and WAL writes after their `done` event
QUIET_S = 11.5  # a backend's pending table statistics are flushed within 10 s of idling
IDLE_S = 12.0
KINDS = ("read", "write", "later")
EARLIER = 3  # a `later` turn is the fourth of its conversation: three read turns before it
OWN = ("pg_stat", "pg_current_wal_lsn", "pg_wal_lsn_diff")  # the snapshots' own statements

STATEMENTS_SQL = """
SELECT queryid, calls, total_exec_time, rows, query FROM pg_stat_statements s
JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database()"""
TABLES_SQL = "SELECT relname, n_tup_upd - n_tup_hot_upd, n_tup_ins FROM pg_stat_user_tables"


def on_cpu_s(process: psutil.Process) -> float:
    """A live process's CPU seconds: /proc/<pid>/schedstat's time on CPU (nanoseconds), where
    the kernel has it; utime + stime (whole clock ticks, 10 ms) otherwise. The ticks of ten
    backends could be off by 0.1 s together: a turn's Postgres CPU is a few ms."""
    try:
        with open(f"/proc/{process.pid}/schedstat", encoding="ascii") as stat:
            return int(stat.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        t = process.cpu_times()
        return float(t.user + t.system)


def cluster_cpu_s(postmaster: int) -> float:
    """CPU seconds of the cluster: the postmaster, its live children (backends, WAL writer,
    checkpointer, autovacuum) and its children that exited (cutime + cstime, in ticks)."""
    process = psutil.Process(postmaster)
    t = process.cpu_times()
    total = on_cpu_s(process) + float(t.children_user + t.children_system)
    for child in process.children(recursive=True):
        # exited meanwhile: counted in the postmaster's children times the next time
        with contextlib.suppress(psutil.Error):
            total += on_cpu_s(child)
    return total


@dataclass
class Snapshot:
    at: float
    cpu_s: float
    wal: int
    statements: dict[int, tuple[int, float, str]]  # queryid -> calls, total ms, text
    nonhot: dict[str, int]
    inserts: dict[str, int]


def snapshot(conn: psycopg.Connection[Any], postmaster: int) -> Snapshot:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')").fetchone()
    assert row is not None
    statements = {
        int(q): (int(c), float(t), " ".join(str(text).split()))
        for q, c, t, _, text in conn.execute(STATEMENTS_SQL).fetchall()
        if not any(own in str(text) for own in OWN)
    }
    tables = conn.execute(TABLES_SQL).fetchall()
    return Snapshot(
        at=time.monotonic(),
        cpu_s=cluster_cpu_s(postmaster),
        wal=int(row[0]),
        statements=statements,
        nonhot={str(name): int(n) for name, n, _ in tables},
        inserts={str(name): int(n) for name, _, n in tables},
    )


@dataclass
class Delta:
    """What happened between two snapshots, with a per-second rate to subtract (idle)."""

    seconds: float
    cpu_s: float
    wal: float
    calls: dict[int, float]
    exec_ms: dict[int, float]
    text: dict[int, str]
    nonhot: dict[str, float]
    inserts: dict[str, float] = field(default_factory=dict)

    @classmethod
    def between(cls, a: Snapshot, b: Snapshot) -> Delta:
        calls, exec_ms, text = {}, {}, {}
        for q, (c, t, s) in b.statements.items():
            c0, t0, _ = a.statements.get(q, (0, 0.0, ""))
            if c > c0:
                calls[q], exec_ms[q], text[q] = float(c - c0), t - t0, s
        return cls(
            seconds=b.at - a.at,
            cpu_s=b.cpu_s - a.cpu_s,
            wal=float(b.wal - a.wal),
            calls=calls,
            exec_ms=exec_ms,
            text=text,
            nonhot={k: float(v - a.nonhot.get(k, 0)) for k, v in b.nonhot.items()},
            inserts={k: float(v - a.inserts.get(k, 0)) for k, v in b.inserts.items()},
        )

    def minus_idle(self, idle: Delta) -> Delta:
        f = self.seconds / idle.seconds if idle.seconds else 0.0
        return Delta(
            seconds=self.seconds,
            cpu_s=self.cpu_s - idle.cpu_s * f,
            wal=self.wal - idle.wal * f,
            calls={q: c - idle.calls.get(q, 0.0) * f for q, c in self.calls.items()},
            exec_ms={q: t - idle.exec_ms.get(q, 0.0) * f for q, t in self.exec_ms.items()},
            text=self.text,
            nonhot={k: v - idle.nonhot.get(k, 0.0) * f for k, v in self.nonhot.items()},
            inserts={k: v - idle.inserts.get(k, 0.0) * f for k, v in self.inserts.items()},
        )

    def per_turn(self, turns: int, top: int = 10) -> dict[str, Any]:
        n = max(turns, 1)
        rows: list[dict[str, Any]] = [
            {
                "calls": self.calls[q] / n,
                "exec_ms": self.exec_ms[q] / n,
                "query": self.text[q],
            }
            for q in self.calls
            if self.calls[q] > 0.05 * n or self.exec_ms[q] > 0
        ]
        rows.sort(key=lambda r: -float(r["exec_ms"]))
        return {
            "turns": turns,
            "cpu_ms": 1000 * max(self.cpu_s, 0.0) / n,
            "exec_ms": sum(max(t, 0.0) for t in self.exec_ms.values()) / n,
            "statements": sum(max(c, 0.0) for c in self.calls.values()) / n,
            "wal_bytes": max(self.wal, 0.0) / n,
            "nonhot": {k: v / n for k, v in sorted(self.nonhot.items()) if v / n >= 0.05},
            "inserts": {k: v / n for k, v in sorted(self.inserts.items()) if v / n >= 0.05},
            "top": rows[:top],
            "seconds": self.seconds,
        }


Turn = Callable[[int], Awaitable[TurnResult]]


async def batch(turn: Turn, turns: int, concurrency: int) -> list[TurnResult]:
    queue = iter(range(turns))
    results: list[TurnResult] = []

    async def worker() -> None:
        for i in queue:
            results.append(await turn(i))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


def turn_maker(
    system: str, url: str, secret: str, concurrency: int, tag: str
) -> tuple[Pool, Callable[[str, str, str], Awaitable[TurnResult]]]:
    http = Pool(url, concurrency)
    client: Any = OurClient(http, secret) if system == "ours" else PeerClient(http)

    async def turn(user: str, session: str, text: str) -> TurnResult:
        result: TurnResult = await client.turn(user, f"{tag}-{session}", text)
        return result

    return http, turn


async def measure(
    system: str,
    url: str,
    db_url: str,
    postmaster: int,
    secret: str,
    reads: list[tuple[str, str]],
    writes: list[tuple[str, str]],
    concurrency: int,
    warmup: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Warm-up, an idle window, then a read batch and a write batch. `reads` are (customer,
    order) pairs, `writes` (customer, pending order): the first `warmup` of each warm up."""
    http, post = turn_maker(system, url, secret, concurrency, f"pg{system}")
    kinds: dict[str, list[tuple[str, str]]] = {
        "read": reads[warmup:],
        "write": writes[warmup:],
        "later": reads[warmup:],
    }

    def text(kind: str, order: str) -> str:
        return f"Please cancel {order}." if kind == "write" else f"Hi, where is my order {order}?"

    for i in range(warmup):  # prepared statements, the pools' connections, caches
        await post(reads[i][0], f"wr{i}", text("read", reads[i][1]))
        await post(writes[i][0], f"ww{i}", text("write", writes[i][1]))
    await asyncio.sleep(QUIET_S)
    with psycopg.connect(db_url, autocommit=True) as conn:
        s0 = snapshot(conn, postmaster)
        await asyncio.sleep(IDLE_S)
        s1 = snapshot(conn, postmaster)
        idle = Delta.between(s0, s1)
        result: dict[str, Any] = {
            "idle": {
                "cpu_ms_per_s": 1000 * idle.cpu_s / idle.seconds,
                "statements_per_s": sum(idle.calls.values()) / idle.seconds,
            },
            "kinds": {},
        }
        for kind in KINDS:
            pairs = kinds[kind]

            async def one(i: int, kind: str = kind, pairs: list[tuple[str, str]] = pairs) -> Any:
                user, order = pairs[i]
                return await post(user, f"{kind[0]}{i}", text(kind, order))

            if kind == "later":  # the conversations' earlier turns, before the snapshot
                for _ in range(EARLIER):
                    await batch(one, len(pairs), concurrency)
                await asyncio.sleep(QUIET_S)
            before = snapshot(conn, postmaster)
            started = time.monotonic()
            done = await batch(one, len(pairs), concurrency)
            busy_s = time.monotonic() - started
            await asyncio.sleep(SETTLE_S)
            end = snapshot(conn, postmaster)
            await asyncio.sleep(QUIET_S)
            after = snapshot(conn, postmaster)
            ok = [r for r in done if r.ok]
            entry = Delta.between(before, end).minus_idle(idle).per_turn(len(ok))
            tables = Delta.between(before, after).minus_idle(idle).per_turn(len(ok))
            entry["nonhot"], entry["inserts"] = tables["nonhot"], tables["inserts"]
            entry["errors"] = len(done) - len(ok)
            entry["error_kinds"] = sorted({str(r.error) for r in done if not r.ok})[:3]
            entry["busy_s"] = busy_s
            result["kinds"][kind] = entry
            log(
                f"  {system:5s} {kind:5s} {len(ok)} turns: Postgres {entry['cpu_ms']:.2f} ms CPU,"
                f" {entry['statements']:.1f} statements, {entry['wal_bytes']:.0f} WAL bytes"
                f" per turn ({entry['errors']} failed)"
            )
    await http.aclose()
    return result


def shop(db_url: str, warmup: int, reads: int, writes: int) -> dict[str, list[tuple[str, str]]]:
    """(customer, order) pairs for the reads, and (customer, pending order) for the writes,
    each pending order once (a cancelled order is no longer pending)."""
    with psycopg.connect(db_url) as conn:
        every = conn.execute("SELECT customer_id, id FROM orders ORDER BY id").fetchall()
        pending = conn.execute(
            "SELECT customer_id, id FROM orders WHERE status = 'pending' ORDER BY id"
        ).fetchall()
    read_pairs = [(str(c), str(o)) for c, o in every]
    write_pairs = [(str(c), str(o)) for c, o in pending]
    n_reads = warmup + reads
    return {
        "read": (read_pairs * (n_reads // max(len(read_pairs), 1) + 1))[:n_reads],
        "write": write_pairs[: warmup + writes],
    }
