"""What idle replicas cost Postgres: transactions a second with no traffic at all.

Starts REPLICAS copies of `python -m app serve` (the shipped default of workers) on one
fresh database, waits until they are ready and settled, then counts the database's
committed and rolled-back transactions (pg_stat_database) over WINDOW seconds.

    python -m benchmarks.idle_cost [--replicas 1 4] [--window 60] [--source DIR]

`--source DIR` runs another checkout's app/ (for a before/after: a `git worktree` of an
older commit), with this checkout's database helpers.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg

from tests.pg import create_fresh_database, drop_database

SETTLE_S = 10.0  # startup work (migrations seen, first jittered sweeps) out of the window


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def transactions(admin: str, dbname: str) -> int:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            (dbname,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def measure(replicas: int, window_s: float, source: Path) -> float:
    url, admin = create_fresh_database("csagent_idle")
    dbname = url.rsplit("/", 1)[1].split("?")[0]
    env = {**os.environ, "DATABASE_URL": url, "LOG_LEVEL": "WARNING", "PYTHONPATH": str(source)}
    subprocess.run(
        [sys.executable, "-m", "app", "migrate"],
        env=env,
        cwd=source,
        check=True,
        capture_output=True,
    )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ports = [free_port() for _ in range(replicas)]
        for port in ports:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "app", "serve", "--no-seed", "--port", str(port)],
                    env=env,
                    cwd=source,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        for port in ports:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).is_success:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.3)
        time.sleep(SETTLE_S)
        before = transactions(admin, dbname)
        time.sleep(window_s)
        after = transactions(admin, dbname)
        return (after - before) / window_s / replicas
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        drop_database(admin, url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    for n in args.replicas:
        per = measure(n, args.window, args.source.resolve())
        print(f"{n} idle replica(s): {per:.3f} transactions/s per replica")


if __name__ == "__main__":
    main()
