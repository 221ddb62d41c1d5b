"""What a remote read costs against a built-in one: one tool call as the read node makes it,
through a tool of an MCP server (the `mcp` SDK, one shared session), through an OpenAPI
operation (one pooled HTTP client), and through the built-in `list_all_product_types` (one
query on the seeded shop). Wall time and this process's CPU per call, median of three
passes; the servers are the test servers (tests/integration/actions_servers.py), each a
process of its own on this machine.

    .venv/bin/python -m benchmarks.actions_cost [--n 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolRuntime

from app.actions.catalog import Actions
from app.actions.file import parse_actions
from app.config import Settings
from app.db.migrate import migrate
from app.db.pool import open_pool
from app.db.seed import seed
from app.identity import AgentContext
from app.tools.registry import build_tools
from benchmarks.procs import free_port
from tests.integration.actions_servers import BILLING_SECRET, LOYALTY_SECRET
from tests.pg import create_fresh_database, drop_database


def runtime() -> ToolRuntime[AgentContext, Any]:
    context = AgentContext(user_id="cust_bench", role="customer", thread_id="cust_bench:b")
    return ToolRuntime(
        state={"messages": [], "turn_id": "t"},
        context=context,
        config={},
        stream_writer=lambda _: None,
        tool_call_id="c1",
        store=None,
    )


def caller(tool: BaseTool, args: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
    async def call() -> Any:
        out = await tool.ainvoke(
            {
                "name": tool.name,
                "args": {**args, "runtime": runtime()},
                "id": "c1",
                "type": "tool_call",
            }
        )
        assert out.status != "error", out.content
        return out

    return call


async def timed(n: int, step: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """(ms of wall time, ms of this process's CPU) per call, median of three passes."""
    for _ in range(10):
        await step()  # warm: the session, the pool, the plans
    walls, cpus = [], []
    for _ in range(3):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            await step()
        walls.append((time.perf_counter() - wall) / n * 1e3)
        cpus.append((time.process_time() - cpu) / n * 1e3)
    return sorted(walls)[1], sorted(cpus)[1]


def start(kind: str, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.actions_servers", kind, "--port", str(port)],
        env={**os.environ},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            httpx.get(f"http://127.0.0.1:{port}/_seen", timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{kind} server did not start")


async def measure(n: int) -> list[tuple[str, float, float]]:
    url, admin = create_fresh_database("csagent_actions_bench")
    mcp_port, http_port = free_port(), free_port()
    servers = [start("mcp", mcp_port), start("openapi", http_port)]
    try:
        await migrate(url)
        settings = Settings(database_url=url)
        pool = await open_pool(url, settings, name="bench")
        try:
            await seed(pool)
            builtin = {t.name: t for t in build_tools(pool).read}
            file = parse_actions(
                f"""
sources:
  - {{name: loyalty, mcp: "http://127.0.0.1:{mcp_port}/mcp", identity_secret: "{LOYALTY_SECRET}",
      customer_argument: customer_id}}
  - {{name: billing, openapi: "http://127.0.0.1:{http_port}/openapi.json",
      base_url: "http://127.0.0.1:{http_port}", operations: [getInvoice],
      identity_secret: "{BILLING_SECRET}", customer_argument: customer_id}}
""",
                "bench",
                {},
            )
            actions = await Actions.open(pool, file, builtin)
            try:
                reads = {t.name: t for t in actions.langchain_tools()[0]}
                return [
                    (
                        "built-in list_all_product_types",
                        *await timed(n, caller(builtin["list_all_product_types"], {})),
                    ),
                    (
                        "MCP get_points (X-Customer-Token)",
                        *await timed(n, caller(reads["get_points"], {})),
                    ),
                    (
                        "OpenAPI getInvoice (X-Customer-Token)",
                        *await timed(n, caller(reads["getInvoice"], {"invoice_id": "INV-1"})),
                    ),
                ]
            finally:
                await actions.close()
        finally:
            await pool.close()
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()
        drop_database(admin, url)


def render(rows: list[tuple[str, float, float]], n: int) -> str:
    lines = [
        "## Your own actions: a remote read against a built-in one",
        "",
        f"One read as the read node makes it, {n} calls a pass, median of three passes "
        "(benchmarks/actions_cost.py; the servers are processes on this machine).",
        "",
        "| read | ms per call | ms CPU of the service per call |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {wall:.2f} | {cpu:.2f} |" for name, wall, cpu in rows]
    return "\n".join(lines) + "\n"


async def main(n: int = 300) -> str:
    """The section's markdown (`make bench` appends it to its report)."""
    return render(await measure(n), n)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    print(asyncio.run(main(parser.parse_args().n)))
