"""Parity: the demo shop served as an MCP server (`cs-agent mcp serve-shop`, a process of its
own) and the service with `BUILTIN_TOOLS=false` and an actions file pointing at it. The
tau-bench gold replay through the HTTP API (`cs-agent eval`'s workbench, the scripted gold
agent and customer of tests/integration/test_eval.py) lands on the reference database, as
it does with the built-in tools: every write went out over MCP, confirmed, keyed and signed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import psycopg
import pytest
from openai import AsyncOpenAI

from app.db.seed import generate
from app.eval.runner import CustomerModel, RunOptions, run_tasks
from app.eval.simulator import OpenAIChat
from app.eval.workers import Workbench
from tests.fakellm import ScriptedModelServer
from tests.faults import procs
from tests.integration.test_eval import BY_ID, GoldAgent, scripted_customer_policy
from tests.pg import admin_url, with_database

SHOP_SECRET = "shop-identity-secret-for-the-tests-0123456789"
# Writes of every kind, a read-only task, and a hand-over (a conversation tool, kept).
TASKS = ["cancel-two-orders", "modify-items-card", "modify-payment-paypal", "handoff"]


@pytest.fixture(scope="module")
def names() -> tuple[str, str]:
    """The workbench's name, and the database its one worker will use."""
    name = f"cseval_shop_{uuid.uuid4().hex[:8]}"
    return name, with_database(admin_url(), f"{name}_w0")


@pytest.fixture(scope="module")
def shop_server(names: tuple[str, str], tmp_path_factory: Any) -> Iterator[str]:
    """`cs-agent mcp serve-shop` on the worker's database (opened at its first call)."""
    port = procs.free_port()
    log = tmp_path_factory.mktemp("shop") / "serve-shop.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(procs.APP_ROOT),
        "DATABASE_URL": names[1],
        "SHOP_IDENTITY_SECRET": SHOP_SECRET,
    }
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app", "mcp", "serve-shop", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(log.read_text()) from None
            time.sleep(0.1)
    yield url
    proc.kill()
    proc.wait(10)


@pytest.fixture(scope="module")
def agent_model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(GoldAgent()) as server:
        yield server


@pytest.fixture(scope="module")
async def customer() -> AsyncIterator[CustomerModel]:
    with ScriptedModelServer(scripted_customer_policy) as server:
        async with AsyncOpenAI(base_url=server.base_url, api_key="test") as client:
            yield CustomerModel(OpenAIChat(client, "scripted-customer"), "scripted-customer")


@pytest.fixture(scope="module")
async def bench(
    names: tuple[str, str],
    shop_server: str,
    agent_model: ScriptedModelServer,
    tmp_path_factory: Any,
) -> AsyncIterator[Workbench]:
    root = tmp_path_factory.mktemp("shop-bench")
    file = root / "actions.yaml"
    file.write_text(
        f"sources:\n  - name: shop\n    mcp: {shop_server}\n"
        "    identity_secret: ${SHOP_IDENTITY_SECRET}\n",
        encoding="utf-8",
    )
    env = {
        "LLM_PROVIDER": "openai",
        "OPENAI_BASE_URL": agent_model.base_url,
        "OPENAI_API_KEY": "test",
        "LLM_MODEL": "gpt-4o-mini",
        "LLM_MAX_RETRIES": "0",
        "WRITE_CONFIRMATION": "required",
        "BUILTIN_TOOLS": "false",
        "ACTIONS_FILE": str(file),
        "SHOP_IDENTITY_SECRET": SHOP_SECRET,
    }
    async with Workbench(
        server_url=admin_url(),
        data=generate(),
        size=1,
        log_dir=root,
        service_env=env,
        progress=lambda _: None,
        _name=names[0],
    ) as workbench:
        yield workbench


class TestGoldReplayThroughServeShop:
    async def test_the_gold_replay_lands_on_the_reference_data_over_mcp(
        self,
        bench: Workbench,
        agent_model: ScriptedModelServer,
        customer: CustomerModel,
        names: tuple[str, str],
    ) -> None:
        agent_model.use(GoldAgent())
        results = await run_tasks(
            bench, [BY_ID[i] for i in TASKS], customer, RunOptions(progress=lambda _: None)
        )
        failed = {r.task.id: r.trials[0].reasons for r in results if r.trials[0].reward != 1}
        assert failed == {}
        with psycopg.connect(names[1]) as conn:
            remote = conn.execute(
                "SELECT tool_name, state, ok FROM tool_executions"
                " WHERE thread_id NOT LIKE '%%:mcp-shop' ORDER BY created_at"
            ).fetchall()
            local = conn.execute(
                "SELECT count(*) FROM tool_executions WHERE thread_id LIKE '%%:mcp-shop'"
            ).fetchone()
        # The agent's ledger: each shop write sent over MCP and done; the shop's own ledger
        # applied each once.
        shop_writes = [r for r in remote if r[0] != "transfer_to_human_agents"]
        assert shop_writes and all(r[1:] == ("done", True) for r in shop_writes)
        assert local is not None and local[0] == len(shop_writes)
