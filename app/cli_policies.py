"""Issue 42's commands.

`cs-agent policy list | show V | diff A B | create FILE | test V --tasks FILE |
publish V --percent N [--force --reason R] | rollback`: the policy routes' verbs, on the
database (whoever can reach it is an admin, as for `migrate`). Changes are recorded as
`cli:<user>`.

`cs-agent help import DIR | import --shipped | export DIR`: a company's own help centre
(app/help/transfer.py).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import getpass
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool

from app.errors import AppError
from app.policies import files, store

Work = Callable[[AsyncConnectionPool[Any]], Awaitable[None]]


def actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def add_policy_parser(sub: Any) -> None:
    policy = sub.add_parser("policy", help="policy versions: list, show, diff, create, publish")
    verbs = policy.add_subparsers(dest="policy_command", required=True)
    verbs.add_parser("list", help="versions with state, share and latest test").set_defaults(
        func=cmd_list
    )
    show = verbs.add_parser("show", help="print a version as a policy file")
    show.add_argument("version", type=int)
    show.set_defaults(func=cmd_show)
    diff = verbs.add_parser("diff", help="what changed from version A to version B")
    diff.add_argument("a", type=int)
    diff.add_argument("b", type=int)
    diff.set_defaults(func=cmd_diff)
    create = verbs.add_parser("create", help="a new draft from a policy file")
    create.add_argument("file")
    create.set_defaults(func=cmd_create)
    test = verbs.add_parser("test", help="test a version against live (eval through the service)")
    test.add_argument("version", type=int)
    test.add_argument("--tasks", required=True, help="a task file (eval record, or simulated)")
    test.set_defaults(func=cmd_test)
    publish = verbs.add_parser("publish", help="publish to a share of new conversations")
    publish.add_argument("version", type=int)
    publish.add_argument("--percent", type=int, required=True, help="1-99: candidate; 100: live")
    publish.add_argument("--force", action="store_true", help="past the gate (needs --reason)")
    publish.add_argument("--reason", help="why it is forced; recorded with who forced it")
    publish.set_defaults(func=cmd_publish)
    verbs.add_parser(
        "rollback", help="retire the candidate, or go back to the previous live version"
    ).set_defaults(func=cmd_rollback)


def _run(work: Work) -> None:
    from app.cli_db import settings_with_database, with_pool

    try:
        asyncio.run(with_pool(settings_with_database(), work))
    except AppError as error:
        print(f"error: {error.code}: {error.message}", file=sys.stderr)
        raise SystemExit(2) from None


def cmd_list(args: argparse.Namespace) -> None:
    async def work(pool: AsyncConnectionPool[Any]) -> None:
        print("| version | state | percent | created by | created at | note | latest test |")
        print("|---|---|---|---|---|---|---|")
        for v in await store.list_versions(pool):
            test = v["latest_test"] or {}
            print(
                f"| {v['version']} | {v['state']} | {v['percent'] or ''} | {v['created_by']} "
                f"| {v['created_at']:%Y-%m-%d %H:%M} | {v['note']} | {test.get('status', '')} |"
            )

    _run(work)


def cmd_show(args: argparse.Namespace) -> None:
    async def work(pool: AsyncConnectionPool[Any]) -> None:
        sys.stdout.write(files.render(await store.get_version(pool, args.version)))

    _run(work)


def cmd_diff(args: argparse.Namespace) -> None:
    async def work(pool: AsyncConnectionPool[Any]) -> None:
        a = files.render(await store.get_version(pool, args.a)).splitlines(keepends=True)
        b = files.render(await store.get_version(pool, args.b)).splitlines(keepends=True)
        sys.stdout.writelines(difflib.unified_diff(a, b, f"version {args.a}", f"version {args.b}"))

    _run(work)


def cmd_create(args: argparse.Namespace) -> None:
    policy = files.parse(Path(args.file).read_text(encoding="utf-8"))

    async def work(pool: AsyncConnectionPool[Any]) -> None:
        version = await store.create_version(
            pool,
            instructions=policy.instructions,
            procedures=policy.procedures,
            note=policy.note,
            parent=policy.parent,
            actor=actor(),
        )
        print(f"created draft version {version}")

    _run(work)


def cmd_test(args: argparse.Namespace) -> None:
    from app.cli_db import settings_with_database
    from app.eval.policy_gate import PolicyTester

    tasks = json.loads(Path(args.tasks).read_text(encoding="utf-8"))
    if not isinstance(tasks, list):
        raise ValueError(f"{args.tasks}: expected a JSON list of tasks")
    settings = settings_with_database()

    async def work(pool: AsyncConnectionPool[Any]) -> None:
        assert settings.database_url
        tester = PolicyTester(pool, settings, settings.database_url)
        test_id = await tester.start(args.version, tasks, actor())
        print(f"testing version {args.version} against live (test {test_id})...", file=sys.stderr)
        await tester.wait(test_id)
        test = await store.get_test(pool, args.version, test_id)
        print(test["markdown"] or f"the test {test['status']}: {test['error']}")
        print(f"status: {test['status']}")

    _run(work)


def cmd_publish(args: argparse.Namespace) -> None:
    if not 1 <= args.percent <= 100:
        raise ValueError("--percent must be 1-100")
    if args.force and not (args.reason or "").strip():
        raise ValueError("--force needs --reason")

    async def work(pool: AsyncConnectionPool[Any]) -> None:
        order = store.Publish(
            args.version, args.percent, actor(), force=args.force, reason=args.reason
        )
        got = await store.publish(pool, order)
        share = f" at {got['percent']}%" if got["percent"] else ""
        print(f"version {args.version} is {got['state']}{share}")

    _run(work)


def cmd_rollback(args: argparse.Namespace) -> None:
    async def work(pool: AsyncConnectionPool[Any]) -> None:
        got = await store.rollback(pool, actor())
        print(f"version {got['retired']} retired; version {got['live']} is live")

    _run(work)


def _run_plain(work: Work) -> None:
    from app.cli_db import settings_with_database, with_pool

    asyncio.run(with_pool(settings_with_database(), work))


def add_help_parser(sub: Any) -> None:
    help_centre = sub.add_parser("help", help="the help centre: import or export its articles")
    verbs = help_centre.add_subparsers(dest="help_command", required=True)
    imp = verbs.add_parser("import", help="replace every article with DIR's <id>.md files")
    where = imp.add_mutually_exclusive_group(required=True)
    where.add_argument("dir", nargs="?", help="a folder of <id>.md articles")
    where.add_argument("--shipped", action="store_true", help="back to the shipped articles")
    imp.set_defaults(func=cmd_help_import)
    exp = verbs.add_parser("export", help="write every article to DIR as <id>.md")
    exp.add_argument("dir")
    exp.set_defaults(func=cmd_help_export)


def cmd_help_import(args: argparse.Namespace) -> None:
    from app.help.transfer import import_articles, read_articles

    articles = None if args.shipped else read_articles(Path(args.dir))

    async def work(pool: AsyncConnectionPool[Any]) -> None:
        summary = await import_articles(pool, articles, actor())
        source = "the shipped articles" if articles is None else args.dir
        print(f"help centre: {summary.total} articles from {source} ({summary.removed} removed)")

    _run_plain(work)


def cmd_help_export(args: argparse.Namespace) -> None:
    from app.help.transfer import current_articles, write_articles

    async def work(pool: AsyncConnectionPool[Any]) -> None:
        articles = await current_articles(pool)
        await asyncio.to_thread(write_articles, Path(args.dir), articles)
        print(f"wrote {len(articles)} articles to {args.dir}")

    _run_plain(work)
