"""Two service processes on one database (issue 42): a publish, and a rollback, made
through one are followed by the other at its next turn, without a restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.agent.prompts import POLICY
from app.api.auth import issue_token
from app.eval.service import ServiceProcess
from tests.fakellm import ScriptedModelServer
from tests.integration.policy_harness import MARK, PromptRecorder, reset_policies, say

NOAH = "noah_brown_6181"
SECRET = "replica-test-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(scope="module")
def model() -> Iterator[tuple[ScriptedModelServer, PromptRecorder]]:
    recorder = PromptRecorder()
    with ScriptedModelServer(recorder) as server:
        yield server, recorder


@pytest.fixture
async def replicas(
    database_url: str,
    db: AsyncConnectionPool[Any],
    model: tuple[ScriptedModelServer, PromptRecorder],
    tmp_path: Path,
) -> AsyncIterator[list[ServiceProcess]]:
    await reset_policies(db)
    env = {
        "DATABASE_URL": database_url,
        "OPENAI_BASE_URL": model[0].base_url,
        "OPENAI_API_KEY": "test",
        "LLM_MODEL": "gpt-4o-mini",
        "JWT_SECRET": SECRET,
        "APP_ENV": "dev",
        "WEB_WORKERS": "1",
        "LOG_LEVEL": "WARNING",
        "RATE_LIMIT_POSTS_PER_MINUTE": "0",
        "RATE_LIMIT_THREADS_PER_HOUR": "0",
    }
    services = [ServiceProcess(env, tmp_path / f"replica-{i}.log") for i in range(2)]
    for service in services:
        service.start()
    try:
        await asyncio.gather(*(s.wait_ready() for s in services))
        yield services
    finally:
        await asyncio.gather(*(s.stop() for s in services))


def headers(user: str, role: str = "customer") -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(SECRET, user, role=role)}"}  # type: ignore[arg-type]


class TestTwoReplicas:
    async def test_a_publish_and_a_rollback_on_one_are_followed_by_the_other(
        self, replicas: list[ServiceProcess], model: tuple[ScriptedModelServer, PromptRecorder]
    ) -> None:
        recorder = model[1]
        one, other = replicas
        noah, admin = headers(NOAH), headers("staff-lead", "admin")
        async with (
            httpx.AsyncClient(base_url=one.url, timeout=30) as a,
            httpx.AsyncClient(base_url=other.url, timeout=30) as b,
        ):
            await say(b, noah, "rep-1", "before the publish")
            assert MARK not in recorder.prompts["before the publish"][0]

            made = await a.post(
                "/staff/policies",
                json={"instructions": POLICY + "\n- " + MARK, "parent": 1},
                headers=admin,
            )
            version = made.json()["version"]
            published = await a.post(
                f"/staff/policies/{version}/publish",
                json={"percent": 100, "force": True, "reason": "replica test"},
                headers=admin,
            )
            assert published.status_code == 200, published.text

            await say(b, noah, "rep-2", "after the publish")
            assert MARK in recorder.prompts["after the publish"][0]
            await say(b, noah, "rep-1", "the old thread's next turn")
            assert MARK in recorder.prompts["before the publish"][-1]  # moved: v1 retired
            state = (await b.get("/threads/rep-1/state", headers=noah)).json()
            assert state["policy_version"] == version

            back = await a.post("/staff/policies/rollback", headers=admin)
            assert back.json() == {"retired": version, "live": 1}
            await say(b, noah, "rep-3", "after the rollback")
            assert MARK not in recorder.prompts["after the rollback"][0]
