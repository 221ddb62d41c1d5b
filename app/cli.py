"""Command line: `python -m app serve | migrate | seed | data import|export|erase | token |
eval`."""

from __future__ import annotations

import argparse
import asyncio
import errno
import sys
from collections.abc import Sequence
from typing import Any

from psycopg_pool import AsyncConnectionPool

from app.actions.cli import add_actions_parser, add_mcp_parser
from app.cli_db import settings_with_database, with_pool
from app.config import Settings


def _counts(summary: Any) -> str:
    return f"{summary.customers} customers, {summary.products} products, {summary.orders} orders"


async def _prepare(settings: Settings, *, seed_if_empty: bool) -> None:
    from app.db.migrate import migrate
    from app.db.seed import database_is_empty, seed
    from app.help.repository import sync_help_articles

    assert settings.database_url
    await migrate(settings.database_url)

    async def load(pool: AsyncConnectionPool[Any]) -> None:
        await sync_help_articles(pool)  # shipped content, not demo data: always current
        if seed_if_empty and await database_is_empty(pool):
            summary = await seed(pool)
            print(f"loaded demo data: {summary.customers} customers, {summary.orders} orders")

    await with_pool(settings, load)


def cmd_serve(args: argparse.Namespace) -> None:
    import os

    import uvicorn

    from app.logging import configure_logging
    from app.main import create_app
    from app.serving import serve_workers, server_options

    configured = Settings()
    host, port = args.host or configured.host, args.port or configured.port
    problem = port_problem(host, port)
    if problem:  # before the database starts: nothing to undo, and a hint instead of a trace
        raise SystemExit(f"cs-agent: {problem}")
    settings = settings_with_database()
    configure_logging(settings)
    asyncio.run(_prepare(settings, seed_if_empty=not args.no_seed))
    workers = args.workers or settings.web_workers
    print(startup_lines(settings, host, port, workers))
    options = server_options(settings)
    if workers == 1:
        uvicorn.run(create_app(settings), host=host, port=port, **options)
        return
    # Worker processes build their own app from the environment; hand them the database this
    # process resolved (it may be the embedded server, which lives as long as this process).
    assert settings.database_url
    os.environ["DATABASE_URL"] = settings.database_url
    from app.metrics import multiprocess_mode

    # Each worker keeps its metrics in files there; a scrape adds all of them up.
    with multiprocess_mode():
        # Each worker listens on a socket of its own (SO_REUSEPORT): the kernel spreads the
        # connections over them (app/serving.py).
        serve_workers(host, port, workers, options)


def port_problem(host: str, port: int) -> str | None:
    """Why the service could not listen on host:port, in words that say what to do."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return (
                    f"port {port} on {host} is already in use (another cs-agent?). "
                    f"Stop it, or choose another port: `make run PORT={port + 1}` "
                    f"or `python -m app serve --port {port + 1}`"
                )
            return f"cannot listen on {host}:{port}: {error.strerror}"
    return None


def startup_lines(settings: Settings, host: str, port: int, workers: int) -> str:
    """Where everything is: the chat page, the staff console, analytics and the API docs."""
    base = f"http://{host}:{port}"
    console = f"{base}/console"
    if settings.app_env == "dev":
        console += "   (dev: the demo staff sign-in, no token needed)"
    lines = [
        f"cs-agent serving on {base}  (workers: {workers})",
        f"  chat page   {base}/",
        f"  console     {console}",
        f"  analytics   {base}/console/analytics",
    ]
    if settings.serves_api_docs:
        lines.append(f"  API docs    {base}/docs")
    return "\n".join(lines)


def cmd_migrate(_: argparse.Namespace) -> None:
    settings = settings_with_database()
    asyncio.run(_prepare(settings, seed_if_empty=False))
    print("migrations applied")


def cmd_seed(args: argparse.Namespace) -> None:
    from app.db.seed import seed

    settings = settings_with_database()
    asyncio.run(_prepare(settings, seed_if_empty=False))

    async def load(pool: AsyncConnectionPool[Any]) -> None:
        summary = await seed(pool, replace=args.replace)
        print(f"seeded {_counts(summary)}")

    asyncio.run(with_pool(settings, load))


def cmd_data_import(args: argparse.Namespace) -> None:
    from app.db.transfer import import_dir

    settings = settings_with_database()
    asyncio.run(_prepare(settings, seed_if_empty=False))

    async def load(pool: AsyncConnectionPool[Any]) -> None:
        summary = await import_dir(pool, args.dir, replace=args.replace)
        print(f"imported {_counts(summary)}")

    asyncio.run(with_pool(settings, load))


def cmd_data_export(args: argparse.Namespace) -> None:
    from app.db.transfer import export_dir

    settings = settings_with_database()

    async def dump(pool: AsyncConnectionPool[Any]) -> None:
        await export_dir(pool, args.dir)
        print(f"exported to {args.dir}")

    asyncio.run(with_pool(settings, dump))


def cmd_data_erase(args: argparse.Namespace) -> None:
    from app.analytics.sweep import outcome_keeper
    from app.db.erase import erase_user
    from app.identity import USER_ID_RE

    if not USER_ID_RE.fullmatch(args.user_id):
        raise ValueError("a user id is 1-128 characters of A-Z a-z 0-9 _ . @ -")
    settings = settings_with_database()

    async def erase(pool: AsyncConnectionPool[Any]) -> None:
        erased = await erase_user(pool, args.user_id, keep=outcome_keeper(settings))
        print(f"erased {args.user_id}: {erased.summary()}")

    asyncio.run(with_pool(settings, erase))


def cmd_prune(args: argparse.Namespace) -> None:
    from app.analytics.sweep import outcome_keeper
    from app.db.retention import Policy, sweep

    settings = settings_with_database()
    policy = Policy.from_settings(settings)
    keep = outcome_keeper(settings)

    async def prune(pool: AsyncConnectionPool[Any]) -> None:
        swept = await sweep(pool, policy, dry_run=args.dry_run, keep=keep)
        if swept is None:
            print("another sweep holds the retention lock; nothing done")
            return
        label = "would remove (dry run, nothing changed)" if args.dry_run else "removed"
        print(f"retention {label}: {swept.summary()}")

    asyncio.run(with_pool(settings, prune))


def cmd_outcomes_refresh(args: argparse.Namespace) -> None:
    from app.analytics.judging import judge_after_sweep
    from app.analytics.sweep import SweepPolicy, sweep

    settings = settings_with_database()
    policy = SweepPolicy.from_settings(settings, idle_min=args.idle_min)

    async def refresh(pool: AsyncConnectionPool[Any]) -> None:
        swept = await sweep(pool, policy)
        if swept is None:
            print("another sweep holds the outcomes lock; nothing done")
        else:
            print(f"outcomes: {swept.outcomes} computed in {swept.batches} batches")
        judged = await judge_after_sweep(pool, settings)  # None: the judge is off
        if judged is not None:
            print(f"judged: {judged.scored} scored, {judged.unscored} left unscored")

    asyncio.run(with_pool(settings, refresh))


def _since(text: str) -> float:
    """`7d`, `12h`, `30m` or seconds, as seconds."""
    units = {"d": 86_400.0, "h": 3_600.0, "m": 60.0, "s": 1.0}
    value = text.strip().lower()
    scale = units.get(value[-1:])
    try:
        return float(value[:-1] if scale else value) * (scale or 1.0)
    except ValueError:
        raise ValueError(f"--since takes 7d, 12h, 30m or seconds, not {text!r}") from None


def _markdown_report(report: dict[str, Any], since: str) -> str:
    keys = [k for k, v in report["totals"].items() if not isinstance(v, dict)]  # not `tools`
    lines = [f"# cs-agent report, last {since}", "", "| period | " + " | ".join(keys) + " |"]
    lines.append("|" + " --- |" * (len(keys) + 1))
    rows = [(p["start"][:10], p) for p in report["periods"]] + [("total", report["totals"])]
    for label, row in rows:
        lines.append(f"| {label} | " + " | ".join(str(row[k]) for k in keys) + " |")
    return "\n".join(lines)


def cmd_report(args: argparse.Namespace) -> None:
    import json
    from datetime import UTC, datetime, timedelta

    from app.analytics.report import summary

    seconds = _since(args.since)
    settings = settings_with_database()

    async def report(pool: AsyncConnectionPool[Any]) -> None:
        end = datetime.now(UTC)
        got = await summary(pool, end - timedelta(seconds=seconds), end, args.group)
        print(json.dumps(got) if args.format == "json" else _markdown_report(got, args.since))

    asyncio.run(with_pool(settings, report))


def cmd_token(args: argparse.Namespace) -> None:
    from app.api.auth import issue_token

    settings = Settings()
    ttl = args.ttl or settings.jwt_default_ttl_s
    print(
        issue_token(
            settings.jwt_secret.get_secret_value(),
            args.user_id,
            role=args.role,
            ttl_s=ttl,
            name=args.name,
        )
    )


def cmd_eval(args: argparse.Namespace) -> None:
    from pathlib import Path

    from app.eval.command import EvalConfig, evaluate
    from app.eval.tasks import shipped_tasks_path

    config = EvalConfig(
        tasks=Path(args.tasks) if args.tasks else shipped_tasks_path(),
        out=Path(args.out),
        data=Path(args.data) if args.data else None,
        trials=args.trials,
        concurrency=args.concurrency,
        guest=args.as_ == "guest",
        max_turns=args.max_turns,
        task_ids=[i.strip() for i in (args.task_ids or "").split(",") if i.strip()],
    )
    run = asyncio.run(evaluate(config, settings_with_database()))
    for k, value in run.pass_hat().items():
        print(f"pass^{k} = {'n/a' if value is None else f'{value:.3f}'}")
    print(f"wrote {config.out / 'report.md'} and {config.out / 'results.json'}")


def cmd_eval_import(args: argparse.Namespace) -> None:
    from pathlib import Path

    from app.eval.command import import_tau_bench

    out = Path(args.out or f"tau-bench-retail-{args.split}.json")
    tasks = import_tau_bench(Path(args.checkout), args.split, out)
    print(f"wrote {len(tasks)} tasks to {out}")


def cmd_eval_record(args: argparse.Namespace) -> None:
    from pathlib import Path

    from app.analytics.report import FLAG_CODES, RESULTS
    from app.eval.command import record_to_file
    from app.eval.record import RecordOptions

    if (args.flag or args.result) and not args.since:
        raise ValueError("--flag and --result choose among --since's conversations")
    for given, known, name in ((args.flag, FLAG_CODES, "flag"), (args.result, RESULTS, "result")):
        if given is not None and given not in known:
            raise ValueError(f"--{name} is one of {', '.join(known)}, not {given!r}")
    threads = [t.strip() for t in (args.threads or "").split(",") if t.strip()]
    options = RecordOptions(
        threads=threads,
        since_s=_since(args.since) if args.since else None,
        flag=args.flag,
        result=args.result,
        keep_personal_data=args.keep_personal_data,
    )
    out = Path(args.out)
    recorded = asyncio.run(record_to_file(settings_with_database(), options, out))
    for thread_id, why in recorded.skipped:
        print(f"skipped {thread_id}: {why}", file=sys.stderr)
    print(f"wrote {len(recorded.tasks)} tasks to {out}")


def cmd_eval_compare(args: argparse.Namespace) -> None:
    from pathlib import Path

    from app.eval import compare

    candidate = Path(args.candidate)
    result = compare.compare(compare.Run.read(Path(args.baseline)), compare.Run.read(candidate))
    md, js = compare.write(result, Path(args.out) if args.out else candidate)
    print(compare.summary(result))
    print(f"wrote {md} and {js}")
    if args.fail_on_regression and result["regressions"]:
        raise SystemExit(1)


def _eval_parser(sub: Any) -> None:
    ev = sub.add_parser("eval", help="evaluate the live service with a simulated customer")
    ev.add_argument("--tasks", help="task JSON (tau-bench's shape; default: the shipped set)")
    ev.add_argument("--data", help="shop data folder in the tau-bench layout (default: seed)")
    ev.add_argument("--trials", type=int, default=1, help="trials per task (K of pass^k)")
    ev.add_argument("--concurrency", type=int, default=1, help="workers, each a database + service")
    ev.add_argument("--out", default="eval-out", help="folder for report.md and results.json")
    ev.add_argument("--as", dest="as_", choices=["customer", "guest"], default="customer")
    ev.add_argument("--task-ids", help="comma-separated ids of the tasks to run")
    ev.add_argument("--max-turns", type=int, default=30, help="customer turns before giving up")
    ev.set_defaults(func=cmd_eval)
    ev_sub = ev.add_subparsers(dest="eval_command")
    imp = ev_sub.add_parser(
        "import-tau-bench", help="convert a tau-bench checkout's retail tasks into task JSON"
    )
    imp.add_argument("checkout")
    imp.add_argument("--split", choices=["test", "train", "dev", "all"], default="test")
    imp.add_argument("--out", help="default: tau-bench-retail-SPLIT.json")
    imp.set_defaults(func=cmd_eval_import)
    rec = ev_sub.add_parser(
        "record", help="turn recorded conversations into tasks that replay them"
    )
    which = rec.add_mutually_exclusive_group(required=True)
    which.add_argument("--threads", help="comma-separated full thread ids (user_id:session_id)")
    which.add_argument("--since", help="conversations started in the last 7d, 12h, 30m ...")
    rec.add_argument("--flag", help="only those with this outcome flag (analytics)")
    rec.add_argument("--result", help="only those with this outcome result (analytics)")
    rec.add_argument("--out", required=True, help="the task file to write")
    rec.add_argument(
        "--keep-personal-data",
        action="store_true",
        help="keep real names, emails and addresses (default: consistent fakes)",
    )
    rec.set_defaults(func=cmd_eval_record)
    cmp = ev_sub.add_parser("compare", help="compare two eval runs task by task")
    cmp.add_argument("baseline", help="the baseline run's --out folder")
    cmp.add_argument("candidate", help="the candidate run's --out folder")
    cmp.add_argument("--out", help="where compare.md and compare.json go (default: CANDIDATE)")
    cmp.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when a task that passed in the baseline fails in the candidate",
    )
    cmp.set_defaults(func=cmd_eval_compare)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cs-agent", description="cs-agent service commands")
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="migrate, seed an empty database, and serve HTTP")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--no-seed", action="store_true", help="do not load demo data")
    serve.add_argument("--workers", type=int, help="worker processes (default WEB_WORKERS)")
    serve.set_defaults(func=cmd_serve)
    sub.add_parser("migrate", help="apply database migrations").set_defaults(func=cmd_migrate)
    seed = sub.add_parser("seed", help="load the demo shop")
    seed.add_argument("--replace", action="store_true", help="replace existing shop data")
    seed.set_defaults(func=cmd_seed)
    data = sub.add_parser("data", help="import or export shop data (tau-bench retail layout)")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    imp = data_sub.add_parser("import", help="load users.json, products.json, orders.json")
    imp.add_argument("dir")
    imp.add_argument("--replace", action="store_true", help="replace existing shop data")
    imp.set_defaults(func=cmd_data_import)
    exp = data_sub.add_parser("export", help="write users.json, products.json, orders.json")
    exp.add_argument("dir")
    exp.set_defaults(func=cmd_data_export)
    erase = data_sub.add_parser(
        "erase", help="remove a user's threads, transcripts, runs and memory; redact their records"
    )
    erase.add_argument("user_id")
    erase.set_defaults(func=cmd_data_erase)
    prune = sub.add_parser(
        "prune",
        help="delete idle threads and old checkpoint history (THREAD_TTL_DAYS, HISTORY_KEEP_DAYS)",
    )
    prune.add_argument("--dry-run", action="store_true", help="count only, change nothing")
    prune.set_defaults(func=cmd_prune)
    outcomes = sub.add_parser("outcomes", help="conversation outcomes (analytics)")
    outcomes_sub = outcomes.add_subparsers(dest="outcomes_command", required=True)
    refresh = outcomes_sub.add_parser(
        "refresh", help="compute the outcome of every idle or handed-off conversation now"
    )
    refresh.add_argument(
        "--idle-min", type=float, help="idle minutes (default CONVERSATION_IDLE_MIN)"
    )
    refresh.set_defaults(func=cmd_outcomes_refresh)
    report = sub.add_parser("report", help="print the analytics summary")
    report.add_argument("--since", default="7d", help="7d, 12h, 30m or seconds (default 7d)")
    report.add_argument("--group", choices=["day", "week"], default="day")
    report.add_argument("--format", choices=["md", "json"], default="md")
    report.set_defaults(func=cmd_report)
    token = sub.add_parser("token", help="print a bearer token")
    token.add_argument("user_id")
    token.add_argument(
        "--role", choices=["customer", "guest", "staff", "admin"], default="customer"
    )
    token.add_argument("--name", default=None, help="a staff member's display name")
    token.add_argument("--ttl", type=int, help="lifetime in seconds")
    token.set_defaults(func=cmd_token)
    _eval_parser(sub)
    add_actions_parser(sub)
    add_mcp_parser(sub)
    from app.cli_policies import add_help_parser, add_policy_parser

    add_policy_parser(sub)  # issue 42
    add_help_parser(sub)  # issue 42: a company's own help centre
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        args.func(args)
    except (ValueError, OSError) as error:
        # Expected failures (bad input, refused import, unreachable database) read as one line.
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
