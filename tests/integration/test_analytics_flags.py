"""The outcome flags the scripted day does not raise, each through the real service with the
scripted model: a guard ending a turn (the breaker), a late handoff, a failed run, a write
refused by a business rule, a slow answer; time to first token per run; and the sweep on
two replicas at once (two pools in this process, and two `outcomes refresh` processes)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import sys
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from app.analytics.sweep import SweepPolicy, sweep
from app.db.pool import open_pool
from tests.fakellm import Latency, Reply, Script, ScriptedModelServer
from tests.integration import test_analytics as day
from tests.integration.api_harness import LiveServer
from tests.integration.test_analytics import NOAH, a_day, codes, outcomes, policy, say

server = day.server
client = day.client

DELIVERED_ORDER = "#W7678072"


def with_rules(server: LiveServer, **rules: Any) -> SweepPolicy:
    base = policy(server)
    return dataclasses.replace(base, rules=dataclasses.replace(base.rules, **rules))


async def flags_of(pool: AsyncConnectionPool[Any], session: str) -> list[dict[str, str]]:
    flags: list[dict[str, str]] = (await outcomes(pool))[session]["flags"]
    return flags


class TestFlags:
    async def test_a_breaker_refusing_a_failing_tool_flags_the_guard(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        # Three failures open get_order_details' breaker; the fourth call is refused.
        lookups = [Reply.call("get_order_details", order_id=f"#W000000{i}") for i in range(4)]
        scripted_model_session.use(Script([*lookups, Reply.say("I could not find them.")]))
        await say(client, server, "guarded", "where are my orders?")
        await sweep(db, policy(server))
        row = (await outcomes(db))["guarded"]

        assert "guard_ended_turn" in codes(row)
        (guard,) = [f for f in row["flags"] if f["code"] == "guard_ended_turn"]
        assert guard["reason"] == (
            "A breaker refused get_order_details in turn 1 (failing or called too often)."
        )
        assert row["breaker_trips"] == 1
        assert row["tool_errors_by_tool"] == {"get_order_details": 4}

    async def test_a_handoff_after_more_turns_than_allowed_is_late(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        for text in ("hello", "where is my order?", "and when does it arrive?"):
            scripted_model_session.use(Script([Reply.say("Let me see.")]))
            await say(client, server, "late", text)
        scripted_model_session.use(
            Script(
                [
                    Reply.call("transfer_to_human_agents", summary="still unresolved"),
                    Reply.say("A colleague will take over."),
                ]
            )
        )
        await say(client, server, "late", "this is going nowhere")  # a handoff asks nothing
        await sweep(db, with_rules(server, late_handoff_turns=3))
        row = (await outcomes(db))["late"]
        await sweep(db, with_rules(server, late_handoff_turns=4))  # nothing new: not due
        async with db.connection() as conn:
            await conn.execute("UPDATE conversation_outcomes SET activity_at = '-infinity'")
        await sweep(db, with_rules(server, late_handoff_turns=4))
        on_time = (await outcomes(db))["late"]

        assert row["result"] == "handed_off"
        assert {"code": "late_handoff", "reason": (
            "The conversation was handed off after 4 turns (more than 3)."
        )} in row["flags"]  # fmt: skip
        assert "late_handoff" not in codes(on_time)

    async def test_a_run_the_model_failed_flags_failed_run_and_the_result_is_failed(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        scripted_model_session.use(Script([Reply.fail(400)]))  # not retried
        done = await say(client, server, "broken", "where is my order?")
        await sweep(db, policy(server))
        row = (await outcomes(db))["broken"]

        assert done["status"] == "failed"
        assert row["result"] == "failed"
        (failed,) = [f for f in row["flags"] if f["code"] == "failed_run"]
        # Nothing of a failed turn is stored, the customer's message neither.
        assert failed["reason"] == "The first run failed (model_unavailable)."

    async def test_a_write_a_business_rule_refused_flags_policy_refusal(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        scripted_model_session.use(
            Script(
                [
                    Reply.call(
                        "cancel_pending_order", order_id=DELIVERED_ORDER, reason="no longer needed"
                    ),
                    Reply.say("That order was already delivered, so it cannot be cancelled."),
                ]
            )
        )
        asked = await say(client, server, "refused", "cancel my delivered order")
        await sweep(db, policy(server))
        row = (await outcomes(db))["refused"]
        async with db.connection() as conn:
            cur = await conn.execute("SELECT tool_name, ok FROM tool_executions")
            recorded = await cur.fetchall()

        # Not offered for approval (the dry run found the rule refuses it), recorded as the
        # rule's refusal.
        assert asked["status"] == "completed"
        assert recorded == [{"tool_name": "cancel_pending_order", "ok": False}]
        assert {"code": "policy_refusal", "reason": (
            "A business rule refused cancel_pending_order once."
        )} in row["flags"]  # fmt: skip
        assert row["writes_by_tool"] == {}  # refused: nothing written

    async def test_an_answer_slower_than_allowed_to_its_first_token_flags_slow_answer(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
    ) -> None:
        slow = Latency(ttft_ms=700)
        scripted_model_session.use(Script([Reply.say("Here you are.", latency=slow)]))
        await say(client, server, "slow", "where is my order?")
        scripted_model_session.use(Script([Reply.say("You are welcome.")]))
        await say(client, server, "slow", "thanks")
        await sweep(db, with_rules(server, slow_answer_s=0.5))
        row = (await outcomes(db))["slow"]
        async with db.connection() as conn:
            cur = await conn.execute("SELECT ttft_ms FROM runs ORDER BY created_at")
            ttfts = [r["ttft_ms"] for r in await cur.fetchall()]

        assert ttfts[0] >= 700 and ttfts[1] < 500
        (flag,) = [f for f in row["flags"] if f["code"] == "slow_answer"]
        assert re.fullmatch(
            r"The first word of the answer to turn 1 took \d+ s \(more than 0.5 s\)\.",
            flag["reason"],
        )
        assert row["ttft_runs_ms"] == ttfts
        assert row["ttft_p50_ms"] == (ttfts[0] + ttfts[1]) / 2


class TestReplicas:
    async def test_two_pools_sweeping_at_once_leave_one_outcome_per_conversation(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
        database_url: str,
    ) -> None:
        await a_day(client, server, scripted_model_session)
        one_at_a_time = dataclasses.replace(policy(server), batch_size=1)  # many batches
        pools = [await open_pool(database_url, server.settings, name=f"r{i}") for i in (1, 2)]
        try:
            swept = await asyncio.gather(*(sweep(p, one_at_a_time) for p in pools))
            again = await asyncio.gather(*(sweep(p, one_at_a_time) for p in pools))
        finally:
            for p in pools:
                await p.close()
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n, count(DISTINCT thread_id) AS d FROM conversation_outcomes"
            )
            counted = await cur.fetchone()

        assert sum(s.outcomes for s in swept if s is not None) == 5
        assert sum(s.outcomes for s in again if s is not None) == 0
        assert counted == {"n": 5, "d": 5}

    async def test_two_refresh_processes_at_once_leave_one_outcome_per_conversation(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        db: AsyncConnectionPool[Any],
        scripted_model_session: ScriptedModelServer,
        database_url: str,
    ) -> None:
        await a_day(client, server, scripted_model_session)
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "OUTCOMES_BATCH_SIZE": "1",
            "QA_JUDGE_MODEL": "",
        }
        command = [sys.executable, "-m", "app", "outcomes", "refresh", "--idle-min", "0"]
        processes = [
            await asyncio.create_subprocess_exec(
                *command,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            for _ in range(2)
        ]
        results = [await asyncio.wait_for(p.communicate(), 60) for p in processes]
        outs = [out.decode() for out, _ in results]
        computed = [re.search(r"outcomes: (\d+) computed", out) for out in outs]
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n, count(DISTINCT thread_id) AS d FROM conversation_outcomes"
            )
            counted = await cur.fetchone()

        assert [p.returncode for p in processes] == [0, 0], [err for _, err in results]
        # Each printed what it did: a count, or that the other held the lock.
        assert all(m or "another sweep holds" in out for m, out in zip(computed, outs, strict=True))
        assert sum(int(m.group(1)) for m in computed if m) == 5
        assert counted == {"n": 5, "d": 5}
        assert NOAH in (await outcomes(db))["resolved"]["user_id"]
