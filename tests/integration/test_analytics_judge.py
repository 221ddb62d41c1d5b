"""The model judge over real HTTP: conversations through the service, the outcome sweep, then
the judging step against the scripted model server (the only fake, at its HTTP boundary):
scores and reasons stored with the judge's token cost; a judge answering garbage or 500
leaves its conversation unscored and the others scored; no lock or transaction is held
while the judge is waited for; the sample is the thread ids' md5 fraction in SQL and
Python alike."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.analytics.judge import RUBRIC
from app.analytics.judging import judge_after_sweep, sampled
from app.analytics.sweep import sweep
from app.analytics.sweeper import OutcomeSweeper
from app.config import Settings
from tests.fakellm import ChatRequest, Reply, Script, ScriptedModelServer
from tests.integration import test_analytics as day
from tests.integration.api_harness import LiveServer
from tests.integration.test_analytics import NOAH, a_day, outcomes, policy, say, staff

# The analytics tests' live server (sweeping only when a test asks) and client.
server = day.server
client = day.client

JUDGE_MODEL = "judge-model"
JUDGE_PRICE = {"input": 3.0, "output": 15.0}


def judge_settings(server: LiveServer, model: ScriptedModelServer, rate: float = 1.0) -> Settings:
    prices = {**server.settings.price_table, JUDGE_MODEL: JUDGE_PRICE}
    return server.settings.model_copy(
        update={
            "conversation_idle_min": 0.0,  # every conversation is finished
            "qa_judge_model": JUDGE_MODEL,
            "qa_judge_base_url": model.base_url,
            "qa_judge_timeout_s": 10.0,
            "qa_sample_rate": rate,
            "price_table": prices,
        }
    )


def verdict(scores: dict[str, int]) -> str:
    return json.dumps(
        {point: {"score": s, "reason": f"The {point} was {s}."} for point, s in scores.items()}
    )


GOOD = {"resolution": 5, "policy_adherence": 5, "accuracy": 4, "tone": 5}


def judge_by_transcript(request: ChatRequest) -> Reply:
    """The failing tool's conversation gets garbage, the handed-off one a 500, the rest a
    verdict."""
    transcript = request.last_user_text()
    if "#W0000001" in transcript:
        return Reply.say("I think this conversation went rather well overall!")
    if "talk to a human" in transcript:
        return Reply.fail(500)
    return Reply.say(verdict(GOOD))


def judged_threads(rows: dict[str, dict[str, Any]]) -> set[str]:
    return {k for k, row in rows.items() if row["score"] is not None}


class TestJudge:
    async def test_scores_are_stored_and_a_garbage_or_failing_judge_leaves_only_its_own_unscored(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        await a_day(client, server, scripted_model_session)
        settings = judge_settings(server, scripted_model_session)
        scripted_model_session.use(judge_by_transcript)
        await OutcomeSweeper(db, settings).sweep_once()  # the sweep, then the judging step
        requests = scripted_model_session.requests
        rows = await outcomes(db)
        listed = await client.get(
            "/staff/analytics/conversations?max_score=4", headers=staff(server)
        )

        assert len(rows) == 5  # every outcome stored, whatever the judge did
        assert judged_threads(rows) == {"resolved", "declined", "abandoned"}
        for key in ("resolved", "declined", "abandoned"):
            row = rows[key]
            assert row["score"] == 4  # the lowest point
            assert [r["point"] for r in row["score_reasons"]] == [
                "resolution", "policy_adherence", "accuracy", "tone",
            ]  # fmt: skip
            assert row["score_reasons"][2] == {
                "point": "accuracy", "score": 4, "reason": "The accuracy was 4.",
            }  # fmt: skip
            assert row["judge_model"] == JUDGE_MODEL and row["judged_at"] is not None
            assert row["judge_tokens_in"] > 0 and row["judge_tokens_out"] > 0
            cost = (row["judge_tokens_in"] * 3.0 + row["judge_tokens_out"] * 15.0) / 1e6
            assert float(row["judge_cost_usd"]) == pytest.approx(cost, abs=1e-6)
        garbage, failing = rows["failing"], rows["handed"]
        assert garbage["score"] is None and garbage["judge_error"] == "invalid_answer"
        assert garbage["judge_attempts"] == 1 and garbage["judge_tokens_in"] > 0
        assert failing["score"] is None and failing["judge_error"] == "model_error"
        assert failing["judge_attempts"] == 1
        # One request per conversation, plus the SDK's one retry of the 500.
        assert len(requests) == 6
        assert all(r.model == JUDGE_MODEL and not r.stream for r in requests)
        assert all(r.messages[0]["content"] == RUBRIC for r in requests)
        failing_tool = next(r.last_user_text() for r in requests if "#W0000001" in str(r.body))
        assert "[customer] where is order #W0000001?" in failing_tool
        assert "[agent calls get_order_details]" in failing_tool
        assert "[tool get_order_details, error]" in failing_tool  # what the tool returned
        items = listed.json()["items"]
        assert {i["thread_id"].split(":")[1] for i in items} == {
            "resolved", "declined", "abandoned",
        }  # fmt: skip
        assert all(i["score"] == 4 and len(i["score_reasons"]) == 4 for i in items)

    async def test_an_unscored_conversation_waits_for_a_later_sweep_and_new_activity_rejudges(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        scripted_model_session.use(Script([Reply.say("Hello Noah, it ships tomorrow.")]))
        await say(client, server, "again", "when does my order ship?")
        await sweep(db, policy(server))
        settings = judge_settings(server, scripted_model_session)
        scripted_model_session.use(Script([Reply.say("not json")]))
        first = await judge_after_sweep(db, settings)
        scripted_model_session.use(Script([]))  # any request now would fail the test
        second = await judge_after_sweep(db, settings)
        asked_again = len(scripted_model_session.requests)
        async with db.connection() as conn:  # as if the retry wait had passed
            await conn.execute("UPDATE conversation_outcomes SET judge_lease_until = NULL")
        scripted_model_session.use(Script([Reply.say(verdict(GOOD))]))
        third = await judge_after_sweep(db, settings)
        scored = (await outcomes(db))["again"]
        scripted_model_session.use(Script([Reply.say("Tomorrow.")]))
        await say(client, server, "again", "and the other one?")
        await sweep(db, policy(server))
        recomputed = (await outcomes(db))["again"]
        scripted_model_session.use(Script([Reply.say(verdict({**GOOD, "tone": 2}))]))
        await judge_after_sweep(db, settings)
        rejudged = (await outcomes(db))["again"]

        assert first is not None and (first.scored, first.unscored) == (0, 1)
        assert second is not None and (second.scored, second.unscored) == (0, 0)
        assert asked_again == 0
        assert third is not None and third.scored == 1
        assert scored["score"] == 4 and scored["judge_attempts"] == 2
        assert scored["judge_error"] is None
        assert recomputed["turns"] == 2 and recomputed["score"] is None
        assert recomputed["score_reasons"] is None and recomputed["judge_attempts"] == 0
        assert rejudged["score"] == 2
        # The judge's spend is kept across its three answers.
        assert rejudged["judge_tokens_in"] > scored["judge_tokens_in"]

    async def test_no_lock_or_transaction_is_held_while_the_judge_is_waited_for(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
        database_url: str,
    ) -> None:
        await a_day(client, server, scripted_model_session)
        await sweep(db, policy(server))
        settings = judge_settings(server, scripted_model_session)
        scripted_model_session.use(lambda request: Reply.say(verdict(GOOD), delay_s=1.5))
        judging = asyncio.create_task(judge_after_sweep(db, settings))
        for _ in range(100):
            if scripted_model_session.requests:
                break
            await asyncio.sleep(0.02)
        async with db.connection() as conn:
            cur = await conn.execute(
                """SELECT
                     (SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                        WHERE l.locktype = 'advisory' AND d.datname = current_database())
                        AS advisory,
                     (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                        AND state LIKE 'idle in transaction%%') AS open_transactions"""
            )
            during = await cur.fetchone()
        another_sweep = await sweep(db, policy(server))
        judged = await judging

        assert scripted_model_session.requests, "the judge was never called"
        assert during == {"advisory": 0, "open_transactions": 0}
        assert another_sweep is not None  # the sweep's lock was free meanwhile
        assert judged is not None and judged.scored == 5

    async def test_the_sample_is_the_same_in_sql_and_python(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        await a_day(client, server, scripted_model_session)
        await sweep(db, policy(server))
        threads = set(await outcomes(db))
        expected = {k for k in threads if sampled(f"{NOAH}:{k}", 0.5)}
        assert 0 < len(expected) < len(threads)  # the rate splits this day
        scripted_model_session.use(lambda request: Reply.say(verdict(GOOD)))
        judged = await judge_after_sweep(db, judge_settings(server, scripted_model_session, 0.5))

        assert judged is not None and judged.scored == len(expected)
        assert judged_threads(await outcomes(db)) == expected

    async def test_the_judge_is_off_unless_a_model_is_named(
        self, server: LiveServer, db: AsyncConnectionPool[Any]
    ) -> None:
        assert server.settings.qa_judge_model is None
        assert await judge_after_sweep(db, server.settings) is None
