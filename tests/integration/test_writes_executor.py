from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from app.db.checkpointer import PostgresCheckpointer
from app.db.writes import execute_write, recorded_outcome
from app.domain.errors import RuleViolation
from app.tools.results import TOOL_FAILED as UNEXPECTED_FAILURE
from tests import factories as f


async def run(pool: AsyncConnectionPool[Any], key: str, action: Any) -> Any:
    return await execute_write(
        pool,
        idempotency_key=key,
        thread_id="guest_1:s1",
        actor="guest:guest_1",
        customer_id="sara_doe_496",
        tool_name="cancel_pending_order",
        arguments={"order_id": "#W0000001", "reason": "no longer needed"},
        action=action,
    )


async def insert_ticket(conn: AsyncConnection[Any]) -> None:
    await conn.execute(
        "INSERT INTO handoff_tickets (customer_id, thread_id, summary) VALUES (NULL, 't', 's')"
    )


class TestExecuteWriteRecordsOutcomes:
    async def test_success_commits_effect_execution_and_audit_together(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        async def action(conn: AsyncConnection[Any]) -> str:
            await insert_ticket(conn)
            return "done"

        outcome = await run(db, "k1", action)
        assert (outcome.ok, outcome.text, outcome.replayed) == (True, "done", False)
        assert len(await f.rows(db, "SELECT * FROM handoff_tickets")) == 1
        [execution] = await f.rows(db, "SELECT * FROM tool_executions")
        assert (execution["idempotency_key"], execution["ok"], execution["outcome"]) == (
            "k1",
            True,
            "done",
        )
        assert execution["arguments"] == {"order_id": "#W0000001", "reason": "no longer needed"}
        [audit] = await f.rows(db, "SELECT * FROM audit_log")
        assert audit["actor"] == "guest:guest_1"
        assert audit["customer_id"] == "sara_doe_496"
        assert audit["thread_id"] == "guest_1:s1"
        assert audit["tool_name"] == "cancel_pending_order"
        assert (audit["ok"], audit["outcome"], audit["idempotency_key"]) == (True, "done", "k1")
        assert audit["created_at"] is not None

    async def test_rule_violation_is_recorded_and_rolls_back_the_action(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        async def action(conn: AsyncConnection[Any]) -> str:
            await insert_ticket(conn)
            raise RuleViolation("order #W0000001 is 'delivered'.")

        outcome = await run(db, "k1", action)
        assert (outcome.ok, outcome.text) == (False, "Error: order #W0000001 is 'delivered'.")
        assert await f.rows(db, "SELECT * FROM handoff_tickets") == []
        [execution] = await f.rows(db, "SELECT ok, outcome FROM tool_executions")
        assert execution == {"ok": False, "outcome": outcome.text}
        [audit] = await f.rows(db, "SELECT ok, outcome FROM audit_log")
        assert audit == {"ok": False, "outcome": outcome.text}

    async def test_unexpected_failure_is_generic_audited_and_not_recorded(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        async def action(conn: AsyncConnection[Any]) -> str:
            await insert_ticket(conn)
            raise ValueError("secret internals: password=hunter2")

        outcome = await run(db, "k1", action)
        assert (outcome.ok, outcome.text) == (False, UNEXPECTED_FAILURE)
        assert "hunter2" not in outcome.text
        assert await f.rows(db, "SELECT * FROM handoff_tickets") == []
        assert await f.rows(db, "SELECT * FROM tool_executions") == []
        [audit] = await f.rows(db, "SELECT ok, outcome FROM audit_log")
        assert audit == {"ok": False, "outcome": UNEXPECTED_FAILURE}
        assert await recorded_outcome(db, "k1") is None

    async def test_failed_sql_inside_action_is_generic(self, db: AsyncConnectionPool[Any]) -> None:
        async def action(conn: AsyncConnection[Any]) -> str:
            await conn.execute("SELECT * FROM no_such_table")
            return "unreachable"

        outcome = await run(db, "k1", action)
        assert outcome.text == UNEXPECTED_FAILURE
        assert "no_such_table" not in outcome.text

    async def test_no_write_when_the_runs_held_checkpoints_cannot_be_stored(
        self, db: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Inside a run the checkpoint with the write's call is stored first; if it cannot
        be, the write does not run: the model gets the generic error, nothing is recorded."""
        saver = PostgresCheckpointer(db)
        thread_id = f"held-{uuid.uuid4().hex}"
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        stored = "SELECT * FROM checkpoints WHERE thread_id = %s"
        ran = []

        async def action(conn: AsyncConnection[Any]) -> str:
            ran.append(True)
            await insert_ticket(conn)
            return "done"

        async def unreachable(self: PostgresCheckpointer, batches: Any) -> None:
            raise OSError("the database went away")

        async with saver.held_until_needed():
            metadata: Any = {"source": "loop", "step": 1, "parents": {}}
            await saver.aput(config, empty_checkpoint(), metadata, {})
            with monkeypatch.context() as patch:
                patch.setattr(PostgresCheckpointer, "_execute", unreachable)
                outcome = await run(db, "k1", action)
            assert (outcome.ok, outcome.text, ran) == (False, UNEXPECTED_FAILURE, [])
            assert await f.rows(db, "SELECT * FROM tool_executions") == []
            assert await f.rows(db, stored, thread_id) == []
            outcome = await run(db, "k1", action)  # the database is back: stored, then written
            assert (outcome.ok, ran) == (True, [True])
            assert len(await f.rows(db, stored, thread_id)) == 1


class TestExecuteWriteIsExactlyOnce:
    async def test_same_key_twice_runs_once_and_replays_the_outcome(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        calls = 0

        async def action(conn: AsyncConnection[Any]) -> str:
            nonlocal calls
            calls += 1
            await insert_ticket(conn)
            return f"done {calls}"

        first = await run(db, "k1", action)
        second = await run(db, "k1", action)
        assert calls == 1
        assert (first.text, first.replayed) == ("done 1", False)
        assert (second.text, second.ok, second.replayed) == ("done 1", True, True)
        assert len(await f.rows(db, "SELECT * FROM handoff_tickets")) == 1
        assert len(await f.rows(db, "SELECT * FROM tool_executions")) == 1
        assert len(await f.rows(db, "SELECT * FROM audit_log")) == 1

    async def test_refused_outcome_replays_as_refused(self, db: AsyncConnectionPool[Any]) -> None:
        async def action(conn: AsyncConnection[Any]) -> str:
            raise RuleViolation("no.")

        first = await run(db, "k1", action)
        second = await run(db, "k1", action)
        assert (second.ok, second.text, second.replayed) == (False, first.text, True)

    async def test_recorded_outcome_returns_the_observation(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        async def action(conn: AsyncConnection[Any]) -> str:
            return '{"order_id":"#W1"}'

        await run(db, "k1", action)
        recorded = await recorded_outcome(db, "k1")
        assert recorded is not None and recorded.text == '{"order_id":"#W1"}'
        assert await recorded_outcome(db, "other") is None


class TestExecuteWriteUnderConcurrency:
    async def test_same_key_in_parallel_runs_once(self, db: AsyncConnectionPool[Any]) -> None:
        calls = 0

        async def action(conn: AsyncConnection[Any]) -> str:
            nonlocal calls
            calls += 1
            await asyncio.sleep(0.05)
            await insert_ticket(conn)
            return "done"

        outcomes = await asyncio.gather(*(run(db, "k1", action) for _ in range(10)))
        assert calls == 1
        assert {o.text for o in outcomes} == {"done"}
        assert sum(not o.replayed for o in outcomes) == 1
        assert len(await f.rows(db, "SELECT * FROM handoff_tickets")) == 1
