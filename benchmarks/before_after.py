"""Before/after: this tree's service, the service at an earlier commit, and the peer, A/B/C.

    .venv/bin/python -m benchmarks.before_after --before 7f0afe9 [--customers 32 --reps 3]

The earlier commit is checked out into a temporary git worktree and served from there with
this tree's virtualenv; the three run in rotation against one model server, so they see the
same machine load. The earlier tree gets a database of its own, seeded by its own code: its
migrations may end before this tree's (Alembic refuses a revision it does not know), and
its SQL functions (app/db/sql, applied at start) would replace this tree's in a shared one.
Prints a Markdown table (turns/s median over runs, pooled latency percentiles, CPU per
completed turn); nothing is written under benchmarks/ but its out/ folder.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.config import QUICK
from benchmarks.procs import (
    DEFAULT_ADMIN_URL,
    PY,
    ROOT,
    Proc,
    free_port,
    run_checked,
    with_database,
)
from benchmarks.run import Bench, services
from benchmarks.stats import median, p95


def from_tree(tree: Path, args: list[str]) -> list[str]:
    """`python -m app <args>` importing `app` from `tree` (the worktree), not from ROOT."""
    code = f"import sys; sys.path.insert(0, {str(tree)!r}); from app.cli import main; "
    code += f"main({args!r})"
    return [PY, "-c", code]


def serve_from(tree: Path, port: int) -> list[str]:
    # one worker, as `Bench.ours` serves this tree (the default is one per core)
    return from_tree(tree, ["serve", "--no-seed", "--port", str(port), "--workers", "1"])


def before_database(bench: Bench, tree: Path) -> str:
    """A database for the earlier tree, created and seeded by it; its URL."""
    name = f"{bench.dbname}_before"
    with psycopg.connect(bench.admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = with_database(bench.db_url, name)
    env = {"DATABASE_URL": url, "LOG_LEVEL": "WARNING"}
    run_checked(from_tree(tree, ["seed"]), env, bench.out / "seed-before.log")
    return url


def drop_before_database(bench: Bench) -> None:
    with psycopg.connect(bench.admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{bench.dbname}_before" WITH (FORCE)')


def row(name: str, runs: list[dict[str, Any]]) -> str:
    latency = [x for r in runs for x in r["latency_ms"]]
    ttft = [x for r in runs for x in r["ttft_ms"]]

    def per_turn(key: str) -> float:
        return median([1000 * r["cpu"].get(key, 0.0) / max(r["ok"], 1) for r in runs])

    cells = [
        name,
        f"{median([r['turns_per_s'] for r in runs]):.1f}",
        f"{median(latency):,.0f}",
        f"{p95(latency):,.0f}",
        f"{median(ttft):,.0f}",
        f"{per_turn(name):.1f}",
        f"{per_turn('postgres'):.1f}",
        f"{per_turn('machine'):.1f}",
        str(sum(r["errors"] for r in runs)),
    ]
    return "| " + " | ".join(cells) + " |"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.before_after")
    parser.add_argument("--before", required=True, help="the earlier commit")
    parser.add_argument("--customers", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    out = ROOT / "benchmarks" / "out" / f"{time.strftime('%Y%m%d-%H%M%S')}-before-after"
    out.mkdir(parents=True, exist_ok=True)
    bench = Bench(QUICK, out, DEFAULT_ADMIN_URL)
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), args.before],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            bench.create_database()
            before_url = before_database(bench, tree)
            with services(bench, "instant") as urls:
                port = free_port()
                env = bench.service_env(urls["model"]) | {"DATABASE_URL": before_url}
                ready = f"http://127.0.0.1:{port}/healthz"
                bench.start(Proc("before", serve_from(tree, port), env, out / "before.log", ready))
                targets = {
                    "before": f"http://127.0.0.1:{port}",
                    "ours": urls["ours"],
                    "peer": urls["peer"],
                }
                bench.warm_up(targets)
                turns = max(96, 3 * args.customers)
                for rep in range(args.reps):
                    names = list(targets)
                    for name in names[rep % 3 :] + names[: rep % 3]:
                        client = "peer" if name == "peer" else "ours"
                        watch = [name, "model@instant"]
                        run = bench.load(
                            client, targets[name], args.customers, turns, watch, f"ba_{name}"
                        )
                        runs.setdefault(name, []).append(run)
        finally:
            bench.stop_all()
            bench.drop_database()
            drop_before_database(bench)
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
    print(f"\n{args.customers} customers, instant model, {args.reps} runs each")
    print(f"before = {args.before}\n")
    print(
        "| system | turns/s | turn p50 ms | turn p95 ms | TTFT p50 ms | service CPU ms/turn "
        "| Postgres CPU ms/turn | machine CPU ms/turn | errors |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in ("before", "ours", "peer"):
        print(row(name, runs[name]))


if __name__ == "__main__":
    main()
