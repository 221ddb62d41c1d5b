"""Postgres's share of a turn: CPU, statements, WAL bytes and non-HOT updates per read turn
and per write turn, for our service and the tutorial peer (benchmarks/baseline).

Part of the `scale` section (benchmarks/scale_section.py, which starts the private cluster:
`pg_stat_statements` preloaded, `track_io_timing` on). One system at a time on a database of
its own (a copy of the seeded shop), so the cluster's CPU is that system's while the other
idles:

- read turn: "where is my order X?" on a new thread (model -> get_order_details -> model);
- write turn: "please cancel X" (a pending order) on a new thread, the write done in the
  turn (model -> cancel_pending_order -> model): our WRITE_CONFIRMATION is off, as the
  peer has no confirmation step;
- later turn: the read turn as the fourth of its conversation (three read turns on the
  thread before the batch, not measured): what a conversation's turns cost once it is
  going, where a first turn pays for opening the thread.

The turns are split into rounds (3 by default): each round runs every kind of turn on both
systems, one after the other, the first system alternating by round, each on threads and
orders of its own. A system's figures are the sums of its rounds; each round's ratio is kept
too, since one batch's CPU moves by about 20% from run to run (a checkpoint, the machine).

Each batch is its slice of turns, `concurrency` at a time. Measured from its start to 0.5 s
after its last turn: the CPU of every process of the cluster (/proc/<pid>/schedstat, in ns),
the backends that exited included (the postmaster's reaped children's utime + stime), so
autovacuum and the checkpointer count when they run meanwhile (the rounds spread where they
land); `pg_stat_statements` (calls, total time) of the database; the WAL written
(`pg_current_wal_lsn`). Then, after a quiet wait so every backend has flushed its table
counters (Postgres flushes a backend's pending statistics within 10 s of it going idle):
`n_tup_upd - n_tup_hot_upd` and `n_tup_ins` per table. What the cluster does while both
systems idle (their background loops, the snapshots' own statements) is measured the same
way over an idle window and subtracted in proportion to each measurement's length.

An explicit VACUUM after each batch (autovacuum off) was tried, to charge each system its
own vacuum in its own window: it came to 0.1-0.4 ms a turn for either system, and our
statements' own times came out higher than with autovacuum on (1.4-2.0 ms a read turn,
against 1.2), unexplained. Autovacuum is part of what a deployment runs, so it stays on.
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
# the database's own connections: its service's pool (not the snapshot's own)
BACKENDS_SQL = """SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND backend_type = 'client backend'
      AND pid <> pg_backend_pid()"""


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


def backends_cpu_s(pids: list[int]) -> dict[int, float]:
    """Each live backend's CPU seconds (one that exited meanwhile is left out)."""
    out = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error, OSError):
            out[pid] = on_cpu_s(psutil.Process(pid))
    return out


@dataclass
class Snapshot:
    at: float
    cpu_s: float
    backends: dict[int, float]  # pid -> CPU seconds, the database's client backends
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
    pids = [int(pid) for (pid,) in conn.execute(BACKENDS_SQL).fetchall()]
    return Snapshot(
        at=time.monotonic(),
        cpu_s=cluster_cpu_s(postmaster),
        backends=backends_cpu_s(pids),
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
    backend_cpu_s: float  # the system's own connections' share of cpu_s
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
            # a backend that appeared meanwhile counts from zero
            backend_cpu_s=sum(t - a.backends.get(pid, 0.0) for pid, t in b.backends.items()),
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
            backend_cpu_s=self.backend_cpu_s - idle.backend_cpu_s * f,
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
            "backend_cpu_ms": 1000 * max(self.backend_cpu_s, 0.0) / n,
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


@dataclass
class System:
    """One system under measurement: its service's URL and its own copy of the shop."""

    name: str
    url: str
    db_url: str


@dataclass
class _Live:
    system: System
    http: Pool
    post: Callable[[str, str, str], Awaitable[TurnResult]]
    conn: psycopg.Connection[Any]
    postmaster: int
    entries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def snapshot(self) -> Snapshot:
        return snapshot(self.conn, self.postmaster)


def _chunks(pairs: list[tuple[str, str]], rounds: int) -> list[list[tuple[str, str]]]:
    size = max(len(pairs) // max(rounds, 1), 1)
    return [pairs[i * size : (i + 1) * size] for i in range(rounds)]


async def measure(
    systems: list[System],
    postmaster: int,
    secret: str,
    reads: list[tuple[str, str]],
    writes: list[tuple[str, str]],
    concurrency: int,
    warmup: int,
    rounds: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Warm-up, an idle window, then `rounds` rounds: in each, every kind of turn, the
    systems one after the other (their order alternating by round, each on its own slice
    of the pairs). `reads` are (customer, order) pairs, `writes` (customer, pending order):
    the first `warmup` of each warm up. A system's figures are its rounds' sums per turn;
    `rounds` also keeps each round's CPU per turn, so the ratio is read round by round:
    a single batch moves by 20% from run to run."""
    live: list[_Live] = []
    for system in systems:
        http, post = turn_maker(system.name, system.url, secret, concurrency, f"pg{system.name}")
        conn = psycopg.connect(system.db_url, autocommit=True)
        live.append(_Live(system, http, post, conn, postmaster))
    slices = {
        "read": _chunks(reads[warmup:], rounds),
        "write": _chunks(writes[warmup:], rounds),
        "later": _chunks(reads[warmup:], rounds),
    }

    def text(kind: str, order: str) -> str:
        return f"Please cancel {order}." if kind == "write" else f"Hi, where is my order {order}?"

    try:
        for one in live:  # prepared statements, the pools' connections, caches
            for i in range(warmup):
                await one.post(reads[i][0], f"wr{i}", text("read", reads[i][1]))
                await one.post(writes[i][0], f"ww{i}", text("write", writes[i][1]))
        await asyncio.sleep(QUIET_S)
        s0 = [one.snapshot() for one in live]
        await asyncio.sleep(IDLE_S)
        idle = [Delta.between(a, one.snapshot()) for a, one in zip(s0, live, strict=True)]
        per_round: list[dict[str, dict[str, float]]] = []
        for r in range(rounds):
            per_round.append({})
            order = live if r % 2 == 0 else live[::-1]
            for kind in KINDS:
                pairs = slices[kind][r]
                per_round[r][kind] = {}
                for one, quiet in zip(order, idle if r % 2 == 0 else idle[::-1], strict=True):
                    entry = await _batch(one, kind, pairs, r, quiet, concurrency, text)
                    one.entries.setdefault(kind, []).append(entry)
                    per_round[r][kind][one.system.name] = entry["cpu_ms"]
                    per_round[r][kind][f"{one.system.name} backends"] = entry["backend_cpu_ms"]
                    log(
                        f"  round {r + 1}/{rounds} {one.system.name:5s} {kind:5s}"
                        f" {entry['turns']} turns: Postgres {entry['cpu_ms']:.2f} ms CPU"
                        f" ({entry['backend_cpu_ms']:.2f} its connections),"
                        f" {entry['statements']:.1f} statements, {entry['wal_bytes']:.0f} WAL"
                        f" bytes per turn ({entry['errors']} failed)"
                    )
    finally:
        for one in live:
            await one.http.aclose()
            one.conn.close()
    return {
        "rounds": per_round,
        "systems": {
            one.system.name: {
                "idle": {
                    "cpu_ms_per_s": 1000 * quiet.cpu_s / quiet.seconds,
                    "statements_per_s": sum(quiet.calls.values()) / quiet.seconds,
                },
                "kinds": {kind: _summed(entries) for kind, entries in one.entries.items()},
            }
            for one, quiet in zip(live, idle, strict=True)
        },
    }


async def _batch(
    one: _Live,
    kind: str,
    pairs: list[tuple[str, str]],
    r: int,
    idle: Delta,
    concurrency: int,
    text: Callable[[str, str], str],
) -> dict[str, Any]:
    async def turn(i: int) -> Any:
        user, order = pairs[i]
        return await one.post(user, f"{kind[0]}{r}-{i}", text(kind, order))

    if kind == "later":  # the conversations' earlier turns, before the snapshot
        for _ in range(EARLIER):
            await batch(turn, len(pairs), concurrency)
        await asyncio.sleep(QUIET_S)
    before = one.snapshot()
    started = time.monotonic()
    done = await batch(turn, len(pairs), concurrency)
    busy_s = time.monotonic() - started
    await asyncio.sleep(SETTLE_S)
    end = one.snapshot()
    await asyncio.sleep(QUIET_S)
    after = one.snapshot()
    ok = [t for t in done if t.ok]
    entry = Delta.between(before, end).minus_idle(idle).per_turn(len(ok))
    tables = Delta.between(before, after).minus_idle(idle).per_turn(len(ok))
    entry["nonhot"], entry["inserts"] = tables["nonhot"], tables["inserts"]
    entry["errors"] = len(done) - len(ok)
    entry["error_kinds"] = sorted({str(t.error) for t in done if not t.ok})[:3]
    entry["busy_s"] = busy_s
    return entry


def _summed(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A kind's rounds as one: per-turn figures weighted by each round's turns; the top
    statements of the first round."""
    turns = int(sum(e["turns"] for e in entries))
    n = max(turns, 1)

    def mean(key: str) -> float:
        return float(sum(e[key] * e["turns"] for e in entries)) / n

    def tables(key: str) -> dict[str, float]:
        names = {name for e in entries for name in e[key]}
        return {t: float(sum(e[key].get(t, 0.0) * e["turns"] for e in entries)) / n for t in names}

    return {
        "turns": turns,
        "cpu_ms": mean("cpu_ms"),
        "cpu_ms_rounds": [e["cpu_ms"] for e in entries],
        "backend_cpu_ms": mean("backend_cpu_ms"),
        "exec_ms": mean("exec_ms"),
        "statements": mean("statements"),
        "wal_bytes": mean("wal_bytes"),
        "nonhot": tables("nonhot"),
        "inserts": tables("inserts"),
        "top": entries[0]["top"],
        "seconds": sum(e["seconds"] for e in entries),
        "errors": sum(e["errors"] for e in entries),
        "error_kinds": sorted({k for e in entries for k in e["error_kinds"]})[:3],
        "busy_s": sum(e["busy_s"] for e in entries),
    }


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
