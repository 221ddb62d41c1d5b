"""`cs-agent actions list` and `cs-agent actions check`: what the actions file offers the
agent, and whether each source answers. Both connect to every source (the tools of an MCP
server are its own to list)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any


def add_actions_parser(sub: Any) -> None:
    actions = sub.add_parser("actions", help="your own actions (ACTIONS_FILE)")
    actions.add_argument("--file", help="the actions file (default ACTIONS_FILE)")
    actions_sub = actions.add_subparsers(dest="actions_command", required=True)
    actions_sub.add_parser(
        "list", help="each tool: source, kind, idempotent, confirmation line"
    ).set_defaults(func=cmd_actions_list)
    actions_sub.add_parser(
        "check", help="connect to every source and report (exit 1 if one is down)"
    ).set_defaults(func=cmd_actions_check)


def add_mcp_parser(sub: Any) -> None:
    mcp = sub.add_parser("mcp", help="MCP servers of this project")
    mcp_sub = mcp.add_subparsers(dest="mcp_command", required=True)
    shop = mcp_sub.add_parser(
        "serve-shop", help="serve the demo shop's tools as an MCP server (streamable HTTP)"
    )
    shop.add_argument("--port", type=int, required=True)
    shop.add_argument("--host", default="127.0.0.1")
    shop.add_argument("--name", default="shop", help="the source name the agent gives it (aud)")
    shop.add_argument(
        "--identity-secret-env",
        default="SHOP_IDENTITY_SECRET",
        help="the variable holding the source's identity_secret (X-Customer-Token)",
    )
    shop.set_defaults(func=cmd_mcp_serve_shop)


def cmd_mcp_serve_shop(args: argparse.Namespace) -> None:
    import os

    from app.actions.shop_server import serve_shop
    from app.config import Settings

    secret = os.environ.get(args.identity_secret_env, "")
    if len(secret) < 32:
        raise ValueError(f"{args.identity_secret_env} must hold a secret of 32 characters or more")
    settings = Settings()
    asyncio.run(serve_shop(settings, host=args.host, port=args.port, name=args.name, secret=secret))


def cmd_actions_list(args: argparse.Namespace) -> None:
    asyncio.run(_list(_file_of(args)))


def cmd_actions_check(args: argparse.Namespace) -> None:
    if not asyncio.run(_check(_file_of(args))):
        raise SystemExit(1)


def _file_of(args: argparse.Namespace) -> str:
    from app.config import Settings

    path = args.file or Settings().actions_file
    if not path:
        raise ValueError("no actions file: set ACTIONS_FILE or pass --file")
    return str(path)


async def _list(path: str) -> None:
    from app.actions.catalog import Actions
    from app.actions.file import load_actions_file
    from app.config import Settings

    taken = _builtin_names(Settings().builtin_tools)
    actions = await Actions.open(None, load_actions_file(path), taken)
    try:
        rows = [("tool", "source", "kind", "idempotent", "confirm")]
        for name, tool in actions.tools.items():
            confirm = actions.confirm_line(name, {}) if tool.kind == "write" else "-"
            rows.append((name, tool.source, tool.kind, "yes" if tool.idempotent else "no", confirm))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for row in rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[4])
        down = [s.settings.name for s in actions.sources if s.status == "down"]
        if down:
            print(f"\nnot answering (only the tools the file names are listed): {', '.join(down)}")
    finally:
        await actions.close()


async def _check(path: str) -> bool:
    from app.actions.catalog import Actions
    from app.actions.file import load_actions_file

    actions = await Actions.open(None, load_actions_file(path), [])
    try:
        for source in actions.sources:
            tools = [t for t, s in actions.by_tool.items() if s is source]
            where = source.settings.mcp or source.settings.openapi
            print(f"{source.settings.name:<20} {source.status:<5} {len(tools):>3} tools  {where}")
        return all(s.status == "ok" for s in actions.sources)
    finally:
        await actions.close()


def _builtin_names(builtin: bool) -> list[str]:
    from app.tools.registry import CONVERSATION_TOOLS, SPECS

    return list(SPECS) if builtin else sorted(CONVERSATION_TOOLS)
