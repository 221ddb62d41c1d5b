"""Which policy version answers (issue 42), with the real service under uvicorn, a real
Postgres and the scripted model recording what it was told.

Version 1 is the shipped rules, byte for byte; a thread is pinned at its first turn (the
candidate by its bucket, else live) and keeps its version; a rollback moves new threads,
and the rolled-back version's threads, to live; every run records its version.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.agent.prompts import GUEST_UNVERIFIED, POLICY, system_prompt
from app.config import Settings
from app.identity import AgentContext
from app.policies import store
from app.policies.texts import PolicyTexts
from tests.fakellm import ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server
from tests.integration.policy_harness import MARK, PromptRecorder, reset_policies, say

NOAH = "noah_brown_6181"


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url,
        rate_limit_posts_per_minute=0,
        rate_limit_threads_per_hour=0,
        _env_file=None,
    )
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    await reset_policies(db)
    async with server.client() as c:
        yield c


@pytest.fixture
def model(scripted_model_session: ScriptedModelServer) -> PromptRecorder:
    recorder = PromptRecorder()
    scripted_model_session.use(recorder)
    return recorder


async def draft(pool: AsyncConnectionPool[Any], text: str = MARK) -> int:
    return await store.create_version(
        pool,
        instructions=POLICY + "\n- " + text,
        procedures=[],
        note="distinctive",
        parent=1,
        actor="staff-test",
    )


async def run_versions(pool: AsyncConnectionPool[Any], thread_id: str) -> list[int | None]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT policy_version FROM runs WHERE thread_id = %s ORDER BY created_at",
            (thread_id,),
        )
        return [r["policy_version"] for r in await cur.fetchall()]


class TestVersionOne:
    async def test_the_migrated_version_1_is_the_shipped_rules(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        await reset_policies(db)
        assert await PolicyTexts(db).rules(1) == POLICY

    async def test_a_version_1_prompt_is_byte_identical_to_the_shipped_one(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        await reset_policies(db)
        rules = await PolicyTexts(db).rules(1)
        for role, user, verified in (("customer", NOAH, None), ("guest", "guest-1", None)):
            base = AgentContext(user_id=user, role=role, thread_id=f"{user}:s")  # type: ignore[arg-type]
            pinned = AgentContext(
                user_id=user,
                role=role,
                thread_id=f"{user}:s",
                rules=rules,
                policy_version=1,  # type: ignore[arg-type]
            )
            for options in ({}, {"handed_off": True}, {"summary": "earlier: a refund"}):
                shipped = system_prompt(base, verified, **options).content
                assert system_prompt(pinned, verified, **options).content == shipped
        # and "shipped" is what the code said before versions existed
        guest = AgentContext(user_id="guest-1", role="guest", thread_id="guest-1:s", rules=rules)
        assert system_prompt(guest, None).content == POLICY.format(identity=GUEST_UNVERIFIED)

    async def test_the_model_is_sent_the_shipped_prompt_on_a_version_1_thread(
        self, client: httpx.AsyncClient, server: LiveServer, model: PromptRecorder
    ) -> None:
        await say(client, server.headers(NOAH), "v1-a", "hello v1")
        shipped = system_prompt(AgentContext(NOAH, "customer", f"{NOAH}:v1-a"), None).content
        assert model.prompts["hello v1"] == [shipped]

    async def test_a_version_s_content_cannot_be_changed(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        await reset_policies(db)
        with pytest.raises(Exception, match="immutable"):
            async with db.connection() as conn:
                await conn.execute(
                    "UPDATE policy_versions SET instructions = 'x' WHERE version = 1"
                )


class TestPinning:
    async def test_a_draft_is_not_seen_and_runs_and_state_carry_version_1(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model: PromptRecorder,
        db: AsyncConnectionPool[Any],
    ) -> None:
        await draft(db)
        h = server.headers(NOAH)
        await say(client, h, "d-1", "hello draft")
        await say(client, h, "d-1", "and again")
        assert len(model.prompts["hello draft"]) == 2
        assert all(MARK not in p for p in model.prompts["hello draft"])
        assert await run_versions(db, f"{NOAH}:d-1") == [1, 1]
        state = (await client.get("/threads/d-1/state", headers=h)).json()
        assert state["policy_version"] == 1
        runs = (await client.get("/threads/d-1/runs", headers=h)).json()
        assert [r["policy_version"] for r in runs["items"]] == [1, 1]

    async def test_half_the_new_threads_get_the_candidate_and_keep_it_then_rollback(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model: PromptRecorder,
        db: AsyncConnectionPool[Any],
    ) -> None:
        v2 = await draft(db)
        await store.publish(
            db, store.Publish(v2, 50, "staff-lead", force=True, reason="test the split")
        )
        h = server.headers(NOAH)
        sessions = [f"split-{i}" for i in range(40)]
        expected = {s: v2 if store.bucket(f"{NOAH}:{s}") < 50 else 1 for s in sessions}
        assert 5 < sum(v == v2 for v in expected.values()) < 35  # both sides well filled

        async def two_turns(session: str) -> None:
            await say(client, h, session, f"first line of {session}")
            await say(client, h, session, "second line")

        for batch in range(0, 40, 8):
            await asyncio.gather(*(two_turns(s) for s in sessions[batch : batch + 8]))
        for session in sessions:
            prompts = model.prompts[f"first line of {session}"]
            assert len(prompts) == 2
            seen = {v2 if MARK in p else 1 for p in prompts}
            assert seen == {expected[session]}, session  # both turns, the first turn's version
            assert await run_versions(db, f"{NOAH}:{session}") == [expected[session]] * 2

        on_candidate = next(s for s in sessions if expected[s] == v2)
        state = (await client.get(f"/threads/{on_candidate}/state", headers=h)).json()
        assert state["policy_version"] == v2

        rolled = await store.rollback(db, "staff-lead")
        assert rolled == {"retired": v2, "live": 1}
        await say(client, h, "after-rollback", "first line after rollback")
        assert MARK not in model.prompts["first line after rollback"][0]
        # a thread of the retired candidate moves to live at its next turn, recorded
        await say(client, h, on_candidate, "third line")
        assert MARK not in model.prompts[f"first line of {on_candidate}"][-1]
        assert await run_versions(db, f"{NOAH}:{on_candidate}") == [v2, v2, 1]
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT from_version, to_version FROM policy_moves WHERE thread_id = %s",
                (f"{NOAH}:{on_candidate}",),
            )
            assert await cur.fetchall() == [{"from_version": v2, "to_version": 1}]
        deleted = await client.delete(f"/threads/{on_candidate}", headers=h)
        assert deleted.status_code == 204
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM policy_moves WHERE thread_id = %s",
                (f"{NOAH}:{on_candidate}",),
            )
            assert (await cur.fetchone())["n"] == 0  # the record goes with the thread

    async def test_a_version_is_read_from_the_database_once_per_process(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model: PromptRecorder,
        db: AsyncConnectionPool[Any],
    ) -> None:
        v2 = await draft(db, "DISTINCT-RULE-43: once")
        await store.publish(db, store.Publish(v2, 100, "staff-lead", force=True, reason="t"))
        texts = server_policies(server)
        before = texts.reads
        h = server.headers(NOAH)
        for i in range(3):
            await say(client, h, f"cache-{i}", f"cache line {i}")
        assert texts.reads == before + 1
        assert all("DISTINCT-RULE-43" in model.prompts[f"cache line {i}"][0] for i in range(3))


def server_policies(server: LiveServer) -> PolicyTexts:
    texts = server.app.state.services.runs.executor.policies
    assert isinstance(texts, PolicyTexts)
    return texts
