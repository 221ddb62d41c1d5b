"""`make bench` section `scale`: how far one Postgres primary carries the service.

    .venv/bin/python -m benchmarks.scale_section                 # alone, about 15 minutes
    .venv/bin/python -m benchmarks.scale_section --quick         # smoke run, about 5 minutes
    .venv/bin/python -m benchmarks.scale_section --parts pg,idle --into-results
    .venv/bin/python -m benchmarks.scale_section --render benchmarks/out/<stamp>-scale/results.json
    make bench-scale-section          # alone, and into benchmarks/RESULTS.md

Everything runs on a private PostgreSQL cluster the section starts (initdb on a free port,
as tests/faults does: `pg_stat_statements` preloaded, `track_io_timing` on; fsync,
synchronous_commit and full_page_writes off; the machine's shared server is never
restarted), the demo shop seeded once and copied into a database per part:

1. `pg`: Postgres's share of a read turn and a write turn, ours and the tutorial peer
   (benchmarks/pg_share.py): CPU of the cluster's processes (/proc), statements, WAL bytes,
   non-HOT updates per table, the top statements by time.
2. `idle`: transactions and statements a second with 1, 4 and 8 idle replicas of the
   shipped default (`python -m app serve`: one worker per core), polling only
   (DATABASE_LISTEN_URL=off, the loops at their own pace: "before") and with LISTEN
   (the shipped default: "after").
3. `cross`: a cancel, a staff message and a webhook posted on replica A and seen by
   replica B (benchmarks/cross_replica.py), p50/p95, polling only and with LISTEN.
4. The projection (in the report): turns/s one 16-core primary carries at part 1's
   Postgres CPU per turn, and the open conversations that means at one message per 20 s.
5. `workers`: at 32 customers with an instant model, each worker's share of the service's
   CPU (per-worker /proc CPU) over repeated runs, and 2-worker turns/s against 1 worker.

Alone, the results go to benchmarks/out/<stamp>-scale/ (results.json, scale.md); with
`--into-results` the section's text also replaces (or is added as) the section
"Scale on one Postgres" of benchmarks/RESULTS.md, dated as its own run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil  # type: ignore[import-untyped]
import psycopg

from benchmarks import cross_replica, machine, pg_share, summary
from benchmarks.procs import JWT_SECRET, PY, ROOT, Proc, free_port, run_checked, with_database

if TYPE_CHECKING:
    from benchmarks.run import Bench
    from tests.faults.procs import PrivatePostgres

SEED_DB = "csagent_scale_seed"
SETTLE_S = 10.0  # an idle replica's startup work (migrations seen, first sweeps) left out
LIMITS_OFF = {"RATE_LIMIT_POSTS_BURST": "1000000", "TOKEN_BUDGET_PER_DAY": "0"}
MODES = {"poll": "off", "listen": ""}  # DATABASE_LISTEN_URL: off = before; unset = after
PARTS = ("pg", "idle", "cross", "workers")
SECTION_TITLE = "## Scale on one Postgres"


def log(message: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- the private cluster ------------------------------------------------------------------


class Cluster:
    """A private cluster with pg_stat_statements; the shop seeded once, copied per part."""

    def __init__(self, bench: Bench) -> None:
        from tests.faults.procs import PrivatePostgres

        self.pg: PrivatePostgres = PrivatePostgres(dbname=SEED_DB)
        with (self.pg.datadir / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                "shared_preload_libraries = 'pg_stat_statements'\n"
                "pg_stat_statements.track_utility = on\n"
                "pg_stat_statements.max = 10000\n"
                "track_io_timing = on\n"
            )
        self.pg.start()
        for url in (self.pg.url, self.pg.admin_url):  # the shop's copies; the idle counts
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        log(f"private cluster on :{self.pg.port}; seeding the shop")
        env = {"DATABASE_URL": self.pg.url, "LOG_LEVEL": "WARNING"}
        run_checked([PY, "-m", "app", "seed"], env, bench.out / "scale-seed.log")

    @property
    def postmaster(self) -> int:
        pid = self.pg.pid
        assert pid is not None
        return pid

    def database(self, name: str) -> str:
        with psycopg.connect(self.pg.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{SEED_DB}"')
        return with_database(self.pg.url, name)

    def settings(self) -> dict[str, str]:
        names = (
            "server_version",
            "shared_buffers",
            "fsync",
            "synchronous_commit",
            "full_page_writes",
            "track_io_timing",
            "shared_preload_libraries",
        )
        with psycopg.connect(self.pg.admin_url) as conn:
            rows = conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", (list(names),)
            ).fetchall()
        return {str(k): str(v) for k, v in rows}

    def cleanup(self) -> None:
        self.pg.cleanup()
        shutil.rmtree(self.pg.root, ignore_errors=True)


# --- processes ----------------------------------------------------------------------------


def model(bench: Bench, name: str, policy: str, ttft_ms: float = 0, tps: float = 0) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    argv = [PY, "-m", "tests.fakellm", "--port", str(port), "--policy", policy]
    argv += ["--ttft-ms", str(ttft_ms)] if ttft_ms else []
    argv += ["--tps", str(tps)] if tps else []
    bench.start(Proc(name, argv, {}, bench.out / f"{name}.log", ready_url=f"{url}/models"))
    return url


def service(
    bench: Bench,
    name: str,
    db_url: str,
    model_url: str,
    env: dict[str, str] | None = None,
    workers: int | None = None,
) -> str:
    """`python -m app serve` (workers: the shipped default of one per core unless given)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [PY, "-m", "app", "serve", "--no-seed", "--port", str(port)]
    argv += ["--workers", str(workers)] if workers else []
    full_env = {
        "DATABASE_URL": db_url,
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "x",
        "JWT_SECRET": JWT_SECRET,
        "LOG_LEVEL": "WARNING",
        **(env or {}),
    }
    log_file = bench.out / f"{name}.log"
    bench.start(Proc(name, argv, full_env, log_file, ready_url=f"{url}/readyz"))
    return url


def peer(bench: Bench, db_url: str, model_url: str) -> str:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [PY, "-m", "benchmarks.baseline", "--port", str(port)]
    env = {"DATABASE_URL": db_url, "OPENAI_BASE_URL": model_url, "OPENAI_API_KEY": "x"}
    bench.start(Proc("scale-peer", argv, env, bench.out / "scale-peer.log", f"{url}/health"))
    return url


# --- 1. Postgres's share of a turn --------------------------------------------------------


def part_pg(bench: Bench, cluster: Cluster) -> dict[str, Any]:
    plan = bench.plan
    log("scale 1: Postgres's share of a read turn and a write turn, ours and the peer")
    model_url = model(bench, "model@scale-pg", "benchmarks.policy:LookupOrCancel")
    warmup = 6  # past DB_PREPARE_THRESHOLD (5)
    pairs = pg_share.shop(cluster.pg.url, warmup, plan.scale_pg_reads, plan.scale_pg_writes)
    result: dict[str, Any] = {
        "concurrency": plan.scale_pg_concurrency,
        "rounds_planned": plan.scale_pg_rounds,
    }
    ours_db, peer_db = cluster.database("scale_pg_ours"), cluster.database("scale_pg_peer")
    env = {"WRITE_CONFIRMATION": "off", **LIMITS_OFF}
    systems = [
        pg_share.System("ours", service(bench, "scale-ours", ours_db, model_url, env, 1), ours_db),
        pg_share.System("peer", peer(bench, peer_db, model_url), peer_db),
    ]
    try:
        result |= asyncio.run(
            pg_share.measure(
                systems,
                cluster.postmaster,
                JWT_SECRET,
                pairs["read"],
                pairs["write"],
                plan.scale_pg_concurrency,
                warmup,
                plan.scale_pg_rounds,
                log,
            )
        )
    finally:
        bench.stop("scale-ours", "scale-peer", "model@scale-pg")
    return result


# --- 2. idle replicas -----------------------------------------------------------------------


def idle_counts(admin: psycopg.Connection[Any], dbname: str) -> tuple[int, int]:
    admin.execute("SELECT pg_stat_clear_snapshot()")
    row = admin.execute(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
        (dbname,),
    ).fetchone()
    calls = admin.execute(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d"
        " ON d.oid = s.dbid WHERE d.datname = %s",
        (dbname,),
    ).fetchone()
    assert row is not None and calls is not None
    return int(row[0]), int(calls[0])


def idle_statements(admin: psycopg.Connection[Any], dbname: str) -> dict[str, int]:
    """Calls so far of each statement of the database (its text, whitespace folded)."""
    rows = admin.execute(
        "SELECT query, calls FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
        " WHERE d.datname = %s",
        (dbname,),
    ).fetchall()
    found: dict[str, int] = {}
    for query, calls in rows:
        text = " ".join(str(query).split())
        found[text] = found.get(text, 0) + int(calls)
    return found


def part_idle(bench: Bench, cluster: Cluster) -> dict[str, Any]:
    plan = bench.plan
    levels = plan.scale_idle_replicas
    log(f"scale 2: idle replicas {list(levels)}, {plan.scale_idle_window_s:.0f} s windows")
    model_url = "http://127.0.0.1:9/v1"  # never called: no traffic
    result: dict[str, Any] = {"window_s": plan.scale_idle_window_s, "modes": {}}
    for mode, listen in MODES.items():
        dbname = f"scale_idle_{mode}"
        db_url = cluster.database(dbname)
        names: list[str] = []
        rows = []
        try:
            with psycopg.connect(cluster.pg.admin_url, autocommit=True) as admin:
                for level in levels:
                    while len(names) < level:
                        name = f"scale-idle-{mode}-{len(names)}"
                        service(bench, name, db_url, model_url, {"DATABASE_LISTEN_URL": listen})
                        names.append(name)
                    time.sleep(SETTLE_S)
                    x0, s0 = idle_counts(admin, dbname)
                    top0 = idle_statements(admin, dbname)
                    cpu0, t0 = pg_share.cluster_cpu_s(cluster.postmaster), time.monotonic()
                    time.sleep(plan.scale_idle_window_s)
                    x1, s1 = idle_counts(admin, dbname)
                    cpu1, t1 = pg_share.cluster_cpu_s(cluster.postmaster), time.monotonic()
                    top1 = idle_statements(admin, dbname)
                    wall = t1 - t0
                    row: dict[str, Any] = {
                        "replicas": level,
                        "top": sorted(
                            ((n - top0.get(q, 0)) / wall, q)
                            for q, n in top1.items()
                            if n > top0.get(q, 0)
                        )[::-1][:5],
                        "xacts_per_s": (x1 - x0) / wall,  # the counting is done from `postgres`
                        "statements_per_s": (s1 - s0) / wall,
                        "pg_cpu_ms_per_s": 1000 * (cpu1 - cpu0) / wall,
                    }
                    row["xacts_per_s_per_replica"] = row["xacts_per_s"] / level
                    rows.append(row)
                    log(
                        f"  {mode:6s} {level} idle replica(s): {row['xacts_per_s']:.2f}"
                        f" transactions/s ({row['xacts_per_s_per_replica']:.2f} per replica),"
                        f" {row['statements_per_s']:.1f} statements/s"
                    )
        finally:
            bench.stop(*names)
        result["modes"][mode] = rows
    result["workers_per_replica"] = machine.cores()
    result["settle_s"] = SETTLE_S
    return result


# --- 3. cross-replica latency -----------------------------------------------------------------


def part_cross(bench: Bench, cluster: Cluster) -> dict[str, Any]:
    plan = bench.plan
    log(f"scale 3: cross-replica latency, {plan.scale_cross_tries} tries of each")
    model_url = model(bench, "model@scale-cross", "benchmarks.policy:LongAnswer", 100, 20)
    with psycopg.connect(cluster.pg.url) as conn:
        customers = [
            str(r[0])
            for r in conn.execute("SELECT id FROM customers ORDER BY id LIMIT 3").fetchall()
        ]
    result: dict[str, Any] = {"tries": plan.scale_cross_tries, "modes": {}}
    try:
        for mode, listen in MODES.items():
            db_url = cluster.database(f"scale_cross_{mode}")
            with cross_replica.Receiver() as receiver:
                env = {
                    "DATABASE_LISTEN_URL": listen,
                    "HANDOFF_WEBHOOK_URL": receiver.url,
                    **LIMITS_OFF,
                }
                names = (f"scale-cross-{mode}-a", f"scale-cross-{mode}-b")
                try:
                    a = service(bench, names[0], db_url, model_url, env)
                    b = service(bench, names[1], db_url, model_url, env)
                    time.sleep(2.0)
                    result["modes"][mode] = asyncio.run(
                        cross_replica.measure(
                            a,
                            b,
                            JWT_SECRET,
                            db_url,
                            receiver,
                            customers,
                            plan.scale_cross_tries,
                            mode,
                            log,
                        )
                    )
                finally:
                    bench.stop(*names)
    finally:
        bench.stop("model@scale-cross")
    return result


# --- 5. workers that share the load --------------------------------------------------------------


def worker_cpu(supervisor: int) -> dict[int, float]:
    """CPU seconds of each worker process of a `serve --workers N` supervisor."""
    found: dict[int, float] = {}
    for child in psutil.Process(supervisor).children():
        try:
            if any("resource_tracker" in part for part in child.cmdline()):
                continue
            t = child.cpu_times()
            found[child.pid] = float(t.user + t.system)
        except psutil.Error:
            pass
    return found


def cpu_per_turn(run: dict[str, Any], service_name: str, model_name: str) -> dict[str, float]:
    """Where a turn's CPU went on the machine, in ms: the service, Postgres, the scripted
    model, the load generator and the rest (the other service idling, the system)."""
    cpu, ok = run["cpu"], max(run["ok"], 1)
    parts = {
        "service": cpu.get(service_name, 0.0),
        "postgres": cpu.get("postgres", 0.0),
        "model": cpu.get(model_name, 0.0),
        "load generator": cpu.get("client", 0.0),
        "other": cpu.get("other", 0.0),
        "machine": cpu.get("machine", 0.0),
    }
    return {name: 1000 * seconds / ok for name, seconds in parts.items()}


def part_workers(bench: Bench, cluster: Cluster) -> dict[str, Any]:
    plan = bench.plan
    customers, total = 32, plan.scale_worker_turns
    log(f"scale 5: workers sharing the load, {customers} customers, {plan.scale_worker_reps} runs")
    db_url = cluster.database("scale_workers")
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT DISTINCT ON (customer_id) customer_id, id FROM orders ORDER BY customer_id, id"
        ).fetchall()
    pairs = bench.out / "scale-pairs.json"
    pairs.write_text(json.dumps([list(r) for r in rows]))
    model_url = model(bench, "model@scale-workers", "benchmarks.policy:OrderLookup")
    names = {1: "scale-1w", 2: "scale-2w"}
    env = {"WRITE_CONFIRMATION": "off", **LIMITS_OFF}
    urls = {w: service(bench, name, db_url, model_url, env, workers=w) for w, name in names.items()}
    runs: dict[str, list[dict[str, Any]]] = {"1": [], "2": []}
    count = [0]

    def load(workers: int, turns: int) -> dict[str, Any]:
        count[0] += 1
        args = ["load", "--target", "ours", "--url", urls[workers], "--pairs", str(pairs)]
        args += ["--secret", JWT_SECRET, "--customers", str(customers)]
        args += ["--total-turns", str(turns), "--turns", "3", "--tag", f"sw{count[0]}"]
        label = f"scale-workers-{workers}w-{count[0]}"
        watch = [names[workers], "model@scale-workers"]
        raw = bench.client("benchmarks.loadgen", args, watch, label)
        return summary.load_run(raw, server=names[workers])

    try:
        for w in names:
            load(w, 96)  # warm-up: connections, prepared statements
        for rep in range(plan.scale_worker_reps):
            for w in (2, 1) if rep % 2 == 0 else (1, 2):
                pid = bench.procs[names[w]].pid
                before = worker_cpu(pid)
                run = load(w, total)
                after = worker_cpu(pid)
                used = {p: after[p] - before.get(p, 0.0) for p in after}
                spent = sum(used.values()) or 1.0
                entry = {
                    "turns_per_s": run["turns_per_s"],
                    "p50_ms": run["latency_p50"],
                    "p95_ms": run["latency_p95"],
                    "errors": run["errors"],
                    "worker_cpu_s": sorted(used.values(), reverse=True),
                    "top_share": max(used.values()) / spent if used else 0.0,
                    "machine_busy": run["cpu"].get("machine", 0.0)
                    / max(run["cpu"].get("elapsed", 1.0), 1e-9)
                    / machine.cores(),
                    "cpu_ms_per_turn": cpu_per_turn(run, names[w], "model@scale-workers"),
                }
                runs[str(w)].append(entry)
                shares = " / ".join(f"{s / spent:.0%}" for s in entry["worker_cpu_s"])
                log(f"  {w} worker(s): {entry['turns_per_s']:.1f} turns/s, CPU shares {shares}")
    finally:
        bench.stop(*names.values(), "model@scale-workers")
    return {"customers": customers, "turns": total, "runs": runs, "cores": machine.cores()}


# --- the section --------------------------------------------------------------------------


def section(bench: Bench, parts: Sequence[str] = PARTS) -> None:
    """Runs the parts on one private cluster; bench.results["scale"]."""
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "load_before": machine.load_now(),
        "cores": machine.cores(),
    }
    bench.results["scale"] = result
    try:
        cluster = Cluster(bench)
    except (RuntimeError, OSError, TimeoutError) as error:  # e.g. no PostgreSQL binaries
        result["skipped"] = f"{type(error).__name__}: {error}"
        return
    try:
        result["postgres"] = cluster.settings()
        steps = {"pg": part_pg, "idle": part_idle, "cross": part_cross, "workers": part_workers}
        for part in parts:
            started = time.monotonic()
            ran = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "loadavg": os.getloadavg()[0]}
            try:
                result[part] = steps[part](bench, cluster)
            except (RuntimeError, OSError, TimeoutError, psycopg.Error) as error:
                result[part] = {"failed": f"{type(error).__name__}: {error}"}
                log(f"scale {part} failed: {error}")
            result[part]["ran"] = {**ran, "seconds": time.monotonic() - started}
            result.setdefault("seconds", {})[part] = time.monotonic() - started
    finally:
        cluster.cleanup()
    result["load_after"] = machine.load_now()
    bench.commands["benchmarks.scale_section"] = "python -m benchmarks.scale_section"


def into_results(text: str) -> None:
    """Replace the section in benchmarks/RESULTS.md, or add it before "## Reproduce"."""
    path = ROOT / "benchmarks" / "RESULTS.md"
    current = path.read_text() if path.exists() else ""
    start = current.find(SECTION_TITLE + "\n")
    block = text.rstrip() + "\n\n"
    if start >= 0:
        end = current.find("\n## ", start + len(SECTION_TITLE))
        current = current[:start] + block + (current[end + 1 :] if end >= 0 else "")
    else:
        at = current.find("## Reproduce")
        current = current[:at] + block + current[at:] if at >= 0 else current + "\n" + block
    path.write_text(current)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale_section",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="the --quick plan: fewer turns")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help="comma-separated: " + ",".join(PARTS)
    )
    parser.add_argument(
        "--render",
        metavar="RESULTS_JSON",
        nargs="+",
        help="only render runs' benchmarks/out/<stamp>-scale/results.json again; with"
        " several, a later run's parts replace an earlier one's (each part says when it ran)",
    )
    parser.add_argument(
        "--into-results",
        action="store_true",
        help="also put the section into benchmarks/RESULTS.md (replacing its last one)",
    )
    return parser.parse_args(argv)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through `finally`: processes and cluster stopped


def main(argv: Sequence[str] | None = None) -> None:
    from benchmarks.config import FULL, QUICK
    from benchmarks.procs import DEFAULT_ADMIN_URL
    from benchmarks.run import Bench
    from benchmarks.scale_report import render

    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.render:
        merged: dict[str, Any] = {}
        for path in args.render:
            scale = json.loads(Path(path).read_text())["scale"]
            merged = {
                **merged,
                **scale,
                "seconds": {**merged.get("seconds", {}), **scale.get("seconds", {})},
            }
            if len(args.render) > 1:
                ran = [part for part in PARTS if part in scale]
                merged["merged"] = [
                    *merged.get("merged", []),
                    f"{scale['date']} (load average {scale['load_before']['loadavg'][0]:.2f}"
                    f" at its start: {', '.join(ran)})",
                ]
        text = render(merged, alone=True)
        print(text)
        if args.into_results:
            into_results(text)
        return
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"unknown parts: {', '.join(sorted(unknown))}")
    plan = dataclasses.replace(QUICK if args.quick else FULL)
    out = ROOT / "benchmarks" / "out" / f"{time.strftime('%Y%m%d-%H%M%S')}-scale"
    out.mkdir(parents=True, exist_ok=True)
    bench = Bench(plan, out, os.environ.get("DATABASE_URL") or DEFAULT_ADMIN_URL)
    try:
        section(bench, parts)
    finally:
        bench.stop_all()
    (out / "results.json").write_text(json.dumps(bench.results, indent=1, default=str))
    text = render(bench.results["scale"], alone=True)
    (out / "scale.md").write_text(text)
    print(text)
    if args.into_results:
        into_results(text)
        log("wrote the section into benchmarks/RESULTS.md")
    log(f"wrote {out / 'scale.md'}")


if __name__ == "__main__":
    main()
