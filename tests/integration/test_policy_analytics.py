"""Analytics by policy version (issue 42): each outcome carries the version that answered
the conversation; the summary and the conversation list filter by it, and the summary
groups by it with the judge's scores."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.agent.prompts import POLICY
from app.analytics.sweep import SweepPolicy, sweep
from app.config import Settings
from app.policies import store
from tests.fakellm import ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server
from tests.integration.policy_harness import MARK, PromptRecorder, reset_policies, say

NOAH = "noah_brown_6181"


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url,
        outcomes_sweep_every_s=0,  # the test sweeps itself
        rate_limit_posts_per_minute=0,
        rate_limit_threads_per_hour=0,
        _env_file=None,
    )
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any], scripted_model_session: ScriptedModelServer
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    await reset_policies(db)
    scripted_model_session.use(PromptRecorder())
    async with server.client() as c:
        yield c


class TestAnalyticsByVersion:
    async def test_summary_and_list_filter_and_group_by_version_with_scores(
        self, client: httpx.AsyncClient, server: LiveServer, db: AsyncConnectionPool[Any]
    ) -> None:
        v2 = await store.create_version(
            db, instructions=POLICY + "\n- " + MARK, procedures=[], note="", parent=1, actor="t"
        )
        await store.publish(db, store.Publish(v2, 50, "staff-lead", force=True, reason="ab"))
        sessions = [f"an-{i}" for i in range(12)]
        on = {s: v2 if store.bucket(f"{NOAH}:{s}") < 50 else 1 for s in sessions}
        assert set(on.values()) == {1, v2}
        h = server.headers(NOAH)
        await asyncio.gather(*(say(client, h, s, f"hello {s}") for s in sessions))
        await sweep(db, SweepPolicy.from_settings(server.settings, idle_min=0))
        async with db.connection() as conn:  # the judge's scores: 5 on live, 2 on v2
            await conn.execute(
                "UPDATE conversation_outcomes SET score = CASE WHEN policy_version = 1"
                " THEN 5 ELSE 2 END"
            )
        staff = server.headers("staff-alice", "staff")
        n_v2 = sum(v == v2 for v in on.values())

        grouped = await client.get("/staff/analytics/summary?by=policy_version", headers=staff)
        assert grouped.status_code == 200, grouped.text
        by = {g["policy_version"]: g for g in grouped.json()["policy_versions"]}
        assert set(by) == {1, v2}
        assert by[v2]["conversations"] == n_v2 and by[1]["conversations"] == 12 - n_v2
        assert by[1]["score_avg"] == 5.0 and by[v2]["score_avg"] == 2.0
        assert by[v2]["scored"] == n_v2

        only = await client.get(f"/staff/analytics/summary?policy_version={v2}", headers=staff)
        assert only.json()["totals"]["conversations"] == n_v2
        listed = await client.get(
            f"/staff/analytics/conversations?policy_version={v2}", headers=staff
        )
        items = listed.json()["items"]
        assert len(items) == n_v2 and {i["policy_version"] for i in items} == {v2}
        assert {i["thread_id"] for i in items} == {f"{NOAH}:{s}" for s, v in on.items() if v == v2}
        customer = await client.get("/staff/analytics/summary?by=policy_version", headers=h)
        assert customer.status_code == 404
