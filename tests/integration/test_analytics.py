"""Operator analytics over real HTTP: scripted conversations through the service, the
outcome sweep, each outcome and flag, the summary against a count in SQL, and the API and
CLI shapes; staff only."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.agent.tool_exec import DECLINED
from app.analytics.sweep import SweepPolicy, sweep
from app.api.auth import issue_token
from app.config import Settings
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server

NOAH = "noah_brown_6181"
PENDING_ORDER = "#W2611340"
PRICES = {"scripted": {"input": 1.0, "output": 2.0}}


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url,
        outcomes_sweep_every_s=0,  # the tests sweep themselves
        llm_model="scripted",
        price_table=PRICES,
        _env_file=None,
    )
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    async with server.client() as c:
        yield c


def staff(server: LiveServer) -> dict[str, str]:
    secret = server.settings.jwt_secret.get_secret_value()
    return {"Authorization": f"Bearer {issue_token(secret, 'staff-alice', role='staff')}"}


async def say(
    client: httpx.AsyncClient,
    server: LiveServer,
    session: str,
    content: str,
    *,
    resume: str | None = None,
) -> dict[str, Any]:
    h = server.headers(NOAH)
    if resume is not None:
        posted = await client.post(
            f"/threads/{session}/resume", json={"decision": resume}, headers=h
        )
    else:
        posted = await client.post(
            f"/threads/{session}/messages", json={"content": content}, headers=h
        )
    assert posted.status_code == 200, posted.text
    body: dict[str, Any] = posted.json()
    return body


async def a_day(client: httpx.AsyncClient, server: LiveServer, model: ScriptedModelServer) -> None:
    """One conversation of each kind, each in its own thread (session = kind)."""
    model.use(Script([Reply.say("Hello Noah, your order ships tomorrow.")]))
    await say(client, server, "resolved", "when does my order ship?")

    model.use(
        Script(
            [
                Reply.call("transfer_to_human_agents", summary="wants a person"),
                Reply.say("I have transferred you to a colleague."),
            ]
        )
    )
    await say(client, server, "handed", "let me talk to a human please")  # asks nothing

    model.use(
        Script(
            [
                Reply.call(
                    "cancel_pending_order", order_id=PENDING_ORDER, reason="ordered by mistake"
                ),
                Reply.say("All right, I left the order as it is."),
            ]
        )
    )
    await say(client, server, "declined", "cancel my order")
    await say(client, server, "declined", "", resume="reject")

    model.use(
        Script(
            [
                Reply.call("get_order_details", order_id="#W0000001"),
                Reply.call("get_order_details", order_id="#W0000001"),
                Reply.say("I could not find that order."),
            ]
        )
    )
    await say(client, server, "failing", "where is order #W0000001?")

    model.use(
        Script(
            [Reply.call("cancel_pending_order", order_id=PENDING_ORDER, reason="no longer needed")]
        )
    )
    done = await say(client, server, "abandoned", "cancel it")
    assert done["status"] == "interrupted"  # and the customer never answers


async def outcomes(pool: AsyncConnectionPool[Any]) -> dict[str, dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM conversation_outcomes")
        rows = await cur.fetchall()
    return {row["thread_id"].split(":", 1)[1]: row for row in rows}


def codes(row: dict[str, Any]) -> set[str]:
    return {flag["code"] for flag in row["flags"]}


def policy(server: LiveServer, idle_min: float = 0) -> SweepPolicy:
    return SweepPolicy.from_settings(server.settings, idle_min=idle_min)


class TestOutcomes:
    async def test_each_conversation_gets_its_result_counts_and_flags(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        await a_day(client, server, scripted_model_session)
        swept = await sweep(db, policy(server))
        got = await outcomes(db)

        assert swept is not None and swept.outcomes == 5
        assert {k: v["result"] for k, v in got.items()} == {
            "resolved": "resolved",
            "handed": "handed_off",
            "declined": "resolved",
            "failing": "resolved",
            "abandoned": "abandoned",
        }
        assert codes(got["resolved"]) == set()
        assert got["resolved"]["turns"] == 1 and got["resolved"]["model_calls"] == 1
        assert got["handed"]["handoff_reason"]
        assert codes(got["handed"]) == {"asked_for_human"}
        assert got["handed"]["confirmations_asked"] == 0  # a handoff asks nothing
        assert got["handed"]["confirmations_approved"] == 0
        assert got["handed"]["writes_by_tool"] == {"transfer_to_human_agents": 1}
        assert codes(got["declined"]) == {"declined_write"}
        assert got["declined"]["confirmations_declined"] == 1
        assert got["declined"]["writes_by_tool"] == {}
        failing = got["failing"]
        assert codes(failing) == {"repeated_tool_error"}
        assert failing["tool_calls_by_tool"] == {"get_order_details": 2}
        assert failing["tool_errors_by_tool"] == {"get_order_details": 2}
        assert "get_order_details failed 2 times" in failing["flags"][0]["reason"]
        abandoned = got["abandoned"]
        assert abandoned["confirmations_asked"] == 1
        assert abandoned["confirmations_approved"] == 0
        async with db.connection() as conn:
            cur = await conn.execute(
                """SELECT thread_id, array_agg(ttft_ms ORDER BY created_at, run_id) AS ttfts
                   FROM runs WHERE ttft_ms IS NOT NULL GROUP BY thread_id"""
            )
            ttfts = {r["thread_id"].split(":", 1)[1]: r["ttfts"] for r in await cur.fetchall()}
        assert ttfts["resolved"] and not ttfts.get("abandoned")  # it streamed no word
        for key, row in got.items():
            assert (row["ttft_runs_ms"] or []) == ttfts.get(key, [])
        for row in got.values():
            assert row["tokens_in"] > 0 and row["tokens_out"] > 0
            expected = (row["tokens_in"] * 1.0 + row["tokens_out"] * 2.0) / 1e6
            assert float(row["cost_usd"]) == pytest.approx(expected, abs=1e-6)
            assert row["ended_at"] >= row["started_at"]

    async def test_a_sweep_run_twice_leaves_one_outcome_per_conversation(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        await a_day(client, server, scripted_model_session)
        first = await sweep(db, policy(server))
        second = await sweep(db, policy(server))
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n, count(DISTINCT thread_id) AS d FROM conversation_outcomes"
            )
            counted = await cur.fetchone()

        assert first is not None and first.outcomes == 5
        assert second is not None and second.outcomes == 0  # nothing new: nothing due
        assert counted == {"n": 5, "d": 5}

    async def test_a_thread_not_idle_yet_waits_and_new_activity_recomputes(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        scripted_model_session.use(Script([Reply.say("Hi!")]))
        await say(client, server, "again", "hello")
        waiting = await sweep(db, policy(server, idle_min=30))
        assert waiting is not None and waiting.outcomes == 0
        await sweep(db, policy(server))
        scripted_model_session.use(Script([Reply.say("Hi!")]))
        await say(client, server, "again", "hello")
        await sweep(db, policy(server))

        row = (await outcomes(db))["again"]
        assert row["turns"] == 2 and codes(row) == {"customer_repeated"}

    async def test_a_sweep_skips_while_another_holds_the_lock(
        self, server: LiveServer, db: AsyncConnectionPool[Any]
    ) -> None:
        from app.analytics.sweep import OUTCOMES_LOCK_KEY

        async with db.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (OUTCOMES_LOCK_KEY,))
            assert await sweep(db, policy(server)) is None


async def sql_counts(pool: AsyncConnectionPool[Any]) -> dict[str, Any]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT count(*) AS n,
                   count(*) FILTER (WHERE result = 'resolved') AS resolved,
                   count(*) FILTER (WHERE result = 'handed_off') AS handed_off,
                   count(*) FILTER (WHERE tool_errors > 0) AS with_errors,
                   sum(cost_usd)::float8 AS cost
               FROM conversation_outcomes"""
        )
        row = await cur.fetchone()
        # From what the runs recorded, not from the outcomes: every run's time to first
        # token, and each tool's results (a declined write was never called).
        cur = await conn.execute(
            """SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_ms) AS p50,
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_ms) AS p95 FROM runs"""
        )
        ttft = await cur.fetchone()
        cur = await conn.execute(
            """SELECT m ->> 'name' AS tool, count(*) AS calls,
                   count(*) FILTER (WHERE m ->> 'status' = 'error') AS errors
               FROM runs CROSS JOIN LATERAL jsonb_array_elements(result -> 'messages') m
               WHERE m ->> 'role' = 'tool' AND m ->> 'content' <> %s GROUP BY 1""",
            (DECLINED,),
        )
        tools = {r["tool"]: (r["calls"], r["errors"]) for r in await cur.fetchall()}
    assert row is not None and ttft is not None
    return {**row, "ttft": ttft, "tools": tools}


class TestAnalyticsApi:
    async def test_the_summary_rates_match_a_count_in_sql(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        await a_day(client, server, scripted_model_session)
        await sweep(db, policy(server))
        got = await client.get("/staff/analytics/summary?group=day", headers=staff(server))
        weekly = await client.get("/staff/analytics/summary?group=week", headers=staff(server))
        counted = await sql_counts(db)

        assert got.status_code == 200, got.text
        body = got.json()
        (period,) = body["periods"]
        totals = body["totals"]
        assert set(period) == {"start", *totals}
        # When a conversation is counted, for the page to say (the server's settings).
        assert (body["idle_min"], body["sweep_every_s"]) == (30.0, 0.0)
        assert set(totals) == {
            "conversations", "resolved", "handed_off", "abandoned", "failed",
            "resolution_rate", "handoff_rate", "tool_error_rate", "cost_usd",
            "ttft_p50_ms", "ttft_p95_ms", "tools",
        }  # fmt: skip
        n = counted["n"]
        assert totals["conversations"] == n == 5
        assert totals["resolution_rate"] == pytest.approx(counted["resolved"] / n, abs=1e-4)
        assert totals["handoff_rate"] == pytest.approx(counted["handed_off"] / n, abs=1e-4)
        assert totals["tool_error_rate"] == pytest.approx(counted["with_errors"] / n, abs=1e-4)
        assert totals["cost_usd"] == pytest.approx(counted["cost"], abs=1e-6)
        assert totals["ttft_p50_ms"] == pytest.approx(counted["ttft"]["p50"], abs=0.1)
        assert totals["ttft_p95_ms"] == pytest.approx(counted["ttft"]["p95"], abs=0.1)
        assert period["ttft_p95_ms"] == totals["ttft_p95_ms"]  # one day
        assert {name: (t["calls"], t["errors"]) for name, t in totals["tools"].items()} == (
            counted["tools"]
        )
        assert counted["tools"]["get_order_details"] == (2, 2)
        assert totals["tools"]["get_order_details"]["error_rate"] == 1.0
        assert period["tools"] == totals["tools"]
        assert weekly.json()["totals"] == totals

    async def test_conversations_filter_by_flag_and_result_and_page_with_a_cursor(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        await a_day(client, server, scripted_model_session)
        await sweep(db, policy(server))
        h = staff(server)
        declined = await client.get("/staff/analytics/conversations?flag=declined_write", headers=h)
        handed = await client.get("/staff/analytics/conversations?result=handed_off", headers=h)
        pages, cursor = [], None
        while True:
            query = "?limit=2" + (f"&cursor={cursor}" if cursor else "")
            page = (await client.get(f"/staff/analytics/conversations{query}", headers=h)).json()
            pages.append(page["items"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        bad = await client.get("/staff/analytics/conversations?flag=nonsense", headers=h)
        flagged = await client.get("/staff/analytics/conversations?flagged=true", headers=h)
        unflagged = await client.get("/staff/analytics/conversations?flagged=false", headers=h)
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT thread_id FROM conversation_outcomes WHERE flags <> '[]'::jsonb"
            )
            with_flags = {r["thread_id"] for r in await cur.fetchall()}

        (item,) = declined.json()["items"]
        assert set(item) == {
            "thread_id", "channel", "result", "handoff_reason", "flags", "score", "score_reasons",
            "turns", "tool_calls", "tool_errors", "tokens_in", "tokens_out", "cost_usd",
            "started_at", "ended_at", "policy_version",
        }  # fmt: skip
        assert item["thread_id"] == f"{NOAH}:declined" and item["score"] is None
        assert item["flags"][0]["code"] == "declined_write" and item["flags"][0]["reason"]
        transcript = await client.get(f"/staff/threads/{item['thread_id']}", headers=h)
        assert transcript.status_code == 200
        assert [i["thread_id"] for i in handed.json()["items"]] == [f"{NOAH}:handed"]
        every = [i["thread_id"] for page in pages for i in page]
        assert len(every) == len(set(every)) == 5
        assert bad.status_code == 422
        assert {i["thread_id"] for i in flagged.json()["items"]} == with_flags
        assert f"{NOAH}:declined" in with_flags and f"{NOAH}:resolved" not in with_flags
        assert {i["thread_id"] for i in unflagged.json()["items"]} == set(every) - with_flags

    async def test_customers_and_guests_get_404(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        for path in ("/staff/analytics/summary", "/staff/analytics/conversations"):
            customer = await client.get(path, headers=server.headers(NOAH))
            anonymous = await client.get(path)
            assert customer.status_code == 404
            assert anonymous.status_code in (401, 404)


class TestCommandLine:
    async def test_outcomes_refresh_then_report_prints_only_json(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
        database_url: str,
    ) -> None:
        await a_day(client, server, scripted_model_session)
        env = {**os.environ, "DATABASE_URL": database_url, "OUTCOMES_SWEEP_EVERY_S": "0"}

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            command = [sys.executable, "-m", "app", *args]
            return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

        refreshed = await asyncio.to_thread(cli, "outcomes", "refresh", "--idle-min", "0")
        reported = await asyncio.to_thread(cli, "report", "--since", "7d", "--format", "json")
        markdown = await asyncio.to_thread(cli, "report", "--since", "1d")

        assert refreshed.returncode == 0, refreshed.stderr
        assert "outcomes: 5 computed" in refreshed.stdout
        assert reported.returncode == 0, reported.stderr
        totals = json.loads(reported.stdout)["totals"]
        assert totals["conversations"] == 5 and totals["handed_off"] == 1
        assert "| total | 5 |" in markdown.stdout


class TestErase:
    async def test_erasing_a_customer_keeps_their_outcomes_without_their_id(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        from app.db.erase import erase_user

        await a_day(client, server, scripted_model_session)
        await sweep(db, policy(server))
        erased = await erase_user(db, NOAH)
        async with db.connection() as conn:
            cur = await conn.execute("SELECT user_id, thread_id FROM conversation_outcomes")
            rows = await cur.fetchall()

        assert erased.outcomes_anonymised == 5 and len(rows) == 5
        assert all(r["user_id"] is None for r in rows)
        assert not any(NOAH in r["thread_id"] for r in rows)


class TestAfterAHandoff:
    async def test_a_person_then_the_agent_going_on_recomputes_the_outcome(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        scripted_model_session.use(
            Script(
                [
                    Reply.call("transfer_to_human_agents", summary="wants a person"),
                    Reply.say("I have transferred you to a colleague."),
                ]
            )
        )
        await say(client, server, "onward", "let me talk to a human please")
        # Handed off: due at once, no idle wait.
        await sweep(db, policy(server, idle_min=30))
        handed = (await outcomes(db))["onward"]
        assert handed["result"] == "handed_off" and handed["turns"] == 1

        thread = f"{NOAH}:onward"
        alice = staff(server)
        control = (await client.get(f"/staff/threads/{thread}/control", headers=alice)).json()
        for action in ("accept", "release"):
            if action == "release":
                said = await client.post(
                    f"/staff/threads/{thread}/messages",
                    json={"content": "Sorted: your refund is approved."},
                    headers=alice,
                )
                assert said.status_code == 200, said.text
                await say(client, server, "onward", "thank you Alice")
            changed = await client.post(
                f"/staff/threads/{thread}/control",
                json={"action": action, "version": control["version"]},
                headers=alice,
            )
            assert changed.status_code == 200, changed.text
            control = changed.json()
        scripted_model_session.use(Script([Reply.say("Your order ships tomorrow.")]))
        await say(client, server, "onward", "and when does my order ship?")

        await sweep(db, policy(server, idle_min=30))
        # Not idle yet (30 minutes), but its outcome was taken at the handoff: it follows on.
        row = (await outcomes(db))["onward"]
        assert row["turns"] == 3, row
        assert row["activity_at"] > handed["activity_at"]
