"""Ceiling (b): how many small single-row commits per second Postgres takes here (pgbench)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from benchmarks.procs import with_database

INSERT_SQL = "INSERT INTO bench_rows (thread_id, payload) VALUES ('t', 'a small row');\n"


def pgbench_ceiling(
    admin_url: str, dbname: str, out_dir: Path, *, clients: int, jobs: int, seconds: int
) -> dict[str, Any]:
    binary = shutil.which("pgbench")
    if binary is None:
        return {"skipped": "pgbench is not installed"}
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}"')
        conn.execute(f'CREATE DATABASE "{dbname}"')
    try:
        url = with_database(admin_url, dbname)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE bench_rows (id bigserial PRIMARY KEY, thread_id text, payload text)"
            )
        script = out_dir / "pgbench_insert.sql"
        script.write_text(INSERT_SQL)
        parts = urlsplit(url)
        argv = [
            binary,
            "-n",
            "-c",
            str(clients),
            "-j",
            str(jobs),
            "-T",
            str(seconds),
            "-f",
            str(script),
            "-h",
            parts.hostname or "127.0.0.1",
            "-p",
            str(parts.port or 5432),
            "-U",
            parts.username or "postgres",
            dbname,
        ]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        (out_dir / "pgbench.log").write_text(done.stdout + done.stderr)
        match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", done.stdout)
        if done.returncode != 0 or match is None:
            return {"skipped": f"pgbench failed (exit {done.returncode}); see pgbench.log"}
        shown = " ".join(a if a != str(script) else "insert.sql" for a in argv[1:])
        return {"tps": float(match.group(1)), "command": f"pgbench {shown}", "sql": INSERT_SQL}
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
