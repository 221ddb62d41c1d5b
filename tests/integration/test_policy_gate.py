"""The gate through the service itself (issue 42): `POST /staff/policies/{v}/tests` runs
the task twice with `cs-agent eval`'s machinery (fresh databases, service processes over
HTTP, the built-in scripted customer): with live live, and with the version live; then
compares the two as `eval compare` does.

The agent's model (scripted) replays the task's gold actions, except that a system prompt
carrying NEVER-CANCEL makes it refuse the cancel: that version breaks the task.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.agent.prompts import POLICY
from app.cli import main as cli_main
from app.config import Settings
from app.eval.tasks import shipped_tasks_path
from tests.fakellm import ChatRequest, Reply, ScriptedModelServer
from tests.integration.api_harness import LiveServer, live_server
from tests.integration.policy_harness import reset_policies
from tests.integration.test_eval import GoldAgent

LEAD = "staff-lead"
TASK_ID = "cancel-by-mistake"
BREAKS_CANCEL = "NEVER-CANCEL: never cancel an order; say you cannot."


class RulesAwareAgent(GoldAgent):
    def __call__(self, request: ChatRequest) -> Reply:
        reply = super().__call__(request)
        system = " ".join(
            str(m.get("content")) for m in request.messages if m.get("role") == "system"
        )
        if "NEVER-CANCEL" in system and any(
            c.name == "cancel_pending_order" for c in reply.tool_calls
        ):
            return Reply.say("I am sorry, I cannot cancel orders.")
        return reply


@pytest.fixture(scope="module")
def agent_model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(RulesAwareAgent()) as server:
        yield server


@pytest.fixture(scope="module")
def server(database_url: str, agent_model: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url,
        openai_base_url=agent_model.base_url,
        openai_api_key="test",
        llm_model="gpt-4o-mini",
        write_confirmation="required",
        _env_file=None,
    )
    with live_server(settings, agent_model) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await reset_policies(db)
    async with server.client() as c:
        yield c


def task_file() -> list[dict[str, Any]]:
    tasks = json.loads(shipped_tasks_path().read_text())
    return [t for t in tasks if t["id"] == TASK_ID]


async def run_gate(
    client: httpx.AsyncClient, admin: dict[str, str], instructions: str
) -> tuple[int, dict[str, Any]]:
    made = await client.post(
        "/staff/policies", json={"instructions": instructions, "parent": 1}, headers=admin
    )
    version = int(made.json()["version"])
    started = await client.post(
        f"/staff/policies/{version}/tests", json={"tasks": task_file()}, headers=admin
    )
    assert started.status_code == 202, started.text
    test_id = started.json()["id"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        test = (
            await client.get(f"/staff/policies/{version}/tests/{test_id}", headers=admin)
        ).json()
        if test["status"] != "running":
            return version, test
        await asyncio.sleep(1)
    raise AssertionError("the policy test did not finish in 300 s")


class TestGateThroughTheService:
    async def test_an_equal_version_passes_and_one_that_breaks_a_cancel_regresses(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        admin = server.headers(LEAD, "admin")
        equal, passed = await run_gate(client, admin, POLICY)
        assert passed["status"] == "passed", passed
        assert passed["baseline"] == 1 and passed["compare"]["regressions"] == []
        [row] = passed["compare"]["tasks"]
        assert row["id"] == TASK_ID and row["baseline"]["rewards"] == [1.0]
        assert row["candidate"]["rewards"] == [1.0]

        broken, regressed = await run_gate(client, admin, POLICY + "\n- " + BREAKS_CANCEL)
        assert regressed["status"] == "regressed", regressed
        assert regressed["compare"]["regressions"] == [TASK_ID]
        assert TASK_ID in regressed["markdown"] and "regressions" in regressed["markdown"]

        refused = await client.post(
            f"/staff/policies/{broken}/publish", json={"percent": 100}, headers=admin
        )
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "gate_not_passed"
        published = await client.post(
            f"/staff/policies/{equal}/publish", json={"percent": 100}, headers=admin
        )
        assert published.status_code == 200 and published.json()["state"] == "live"


class TestGateFromTheCommandLine:
    def test_policy_test_prints_the_comparison_and_its_status(
        self,
        database_url: str,
        agent_model: ScriptedModelServer,
        monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        for name, value in {
            "DATABASE_URL": database_url,
            "OPENAI_BASE_URL": agent_model.base_url,
            "OPENAI_API_KEY": "test",
            "LLM_MODEL": "gpt-4o-mini",
        }.items():
            monkeypatch.setenv(name, value)
        policy = tmp_path / "p.md"
        policy.write_text(
            f"---\nparent: 1\nnote: breaks cancels\n---\n{POLICY}\n- {BREAKS_CANCEL}\n"
        )
        tasks = tmp_path / "tasks.json"
        tasks.write_text(json.dumps(task_file()))
        cli_main(["policy", "create", str(policy)])
        version = capsys.readouterr().out.split()[-1]
        cli_main(["policy", "test", version, "--tasks", str(tasks)])
        out = capsys.readouterr().out
        assert out.rstrip().endswith("status: regressed"), out
        assert TASK_ID in out
        cli_main(["policy", "list"])
        listed = capsys.readouterr().out
        assert f"| {version} | draft |" in listed and "| regressed |" in listed
