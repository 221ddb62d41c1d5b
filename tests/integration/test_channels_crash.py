"""A Chatwoot message survives the process that acknowledged it: the service runs as its own
OS process (`python -m app serve`), is killed with SIGKILL while the turn waits on the model,
and another process answers the stored message, once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.fakellm import ChatRequest, Reply, ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.chatwoot_standin import ChatwootStandIn
from tests.integration.test_channels_chatwoot import NOAH, SECRET, TOKEN, settled
from tests.integration.test_channels_email import free_port

SERVE = [sys.executable, "-m", "app", "serve", "--workers", "1", "--no-seed"]


class Service:
    """`python -m app serve` in its own session, so SIGKILL takes all of it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [*SERVE, "--port", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> Service:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError("the service did not start")

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture
def standin() -> Iterator[ChatwootStandIn]:
    s = ChatwootStandIn(token=TOKEN, secret=SECRET).start()
    yield s
    s.stop()


def env_for(
    database_url: str, model: ScriptedModelServer, standin: ChatwootStandIn
) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "LOG_LEVEL": "WARNING",
        "LLM_PROVIDER": "openai",
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test",
        "LLM_MAX_RETRIES": "0",
        "CHATWOOT_BASE_URL": standin.url,
        "CHATWOOT_BOT_TOKEN": TOKEN,
        "CHATWOOT_WEBHOOK_SECRET": SECRET,
        # a dead process's claim and thread lease expire soon
        "CHANNEL_CLAIM_TTL_S": "2",
        "THREAD_LEASE_TTL_S": "1",
    }


class TestKilledAfterTheAcknowledgement:
    async def test_the_answer_still_arrives_once(
        self,
        database_url: str,
        model_server: ScriptedModelServer,
        standin: ChatwootStandIn,
        db: AsyncConnectionPool[Any],
    ) -> None:
        await load_small_shop(db)
        async with db.connection() as conn:
            await conn.execute(
                "TRUNCATE channel_conversations, channel_inbox, channel_outbox, "
                "email_message_ids, channel_confirmations"
            )
        served: list[str] = []

        def model(request: ChatRequest) -> Reply:
            served.append(request.last_user_text())
            if len(served) == 1:  # the first process never gets its answer
                return Reply(text="too late", delay_s=60)
            return Reply.say("Your order ships tomorrow.")

        model_server.use(model)
        env = env_for(database_url, model_server, standin)
        first = await asyncio.to_thread(Service(env).ready)
        try:
            standin.webhook_url = f"{first.url}/channels/chatwoot/webhook"
            got = await asyncio.to_thread(
                standin.incoming, 21, "where is my order?", identifier=NOAH, verified=True
            )
            assert got.status_code == 200 and got.json()["status"] == "stored"
            for _ in range(200):  # the turn is with the model
                if served:
                    break
                await asyncio.sleep(0.05)
            assert served
            first.kill()
        finally:
            first.stop()
        second = await asyncio.to_thread(Service(env).ready)
        try:
            standin.webhook_url = f"{second.url}/channels/chatwoot/webhook"
            await settled(db, timeout_s=60)
            await asyncio.sleep(1.0)  # nothing more arrives
            assert [m["content"] for m in standin.in_conversation(21)] == [
                "Your order ships tomorrow."
            ]
            assert served == ["where is my order?", "where is my order?"]
        finally:
            second.stop()
