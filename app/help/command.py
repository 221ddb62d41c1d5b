"""`cs-agent help import DIR | import --shipped | export DIR`: a company's own help centre
(app/help/transfer.py)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool


def _run(work: Any) -> None:
    from app.cli import _settings_with_database, _with_pool

    asyncio.run(_with_pool(_settings_with_database(), work))


def add_parser(sub: Any) -> None:
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
    from app.policies.command import actor

    articles = None if args.shipped else read_articles(Path(args.dir))

    async def work(pool: AsyncConnectionPool[Any]) -> None:
        summary = await import_articles(pool, articles, actor())
        source = "the shipped articles" if articles is None else args.dir
        print(f"help centre: {summary.total} articles from {source} ({summary.removed} removed)")

    _run(work)


def cmd_help_export(args: argparse.Namespace) -> None:
    from app.help.transfer import current_articles, write_articles

    async def work(pool: AsyncConnectionPool[Any]) -> None:
        articles = await current_articles(pool)
        await asyncio.to_thread(write_articles, Path(args.dir), articles)
        print(f"wrote {len(articles)} articles to {args.dir}")

    _run(work)
