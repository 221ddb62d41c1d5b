from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool
from psycopg_pool import AsyncConnectionPool

from app.db.idempotency import idempotency_key
from app.tools.registry import PostgresWriteLedger, build_tools
from tests import factories as f

SARA, GIFT = "sara_doe_496", "gift_card_2222222"
CANCEL = {"order_id": "#W0000001", "reason": "no longer needed"}


@pytest.fixture
async def cancel(db: AsyncConnectionPool[Any]) -> BaseTool:
    await f.seed(
        db,
        customers=(f.customer(),),
        products=(f.bottle(), f.lamp()),
        orders=(f.order("#W0000001", paid_with=GIFT),),
    )
    [tool] = [t for t in build_tools(db).write if t.name == "cancel_pending_order"]
    return tool


async def gift_balance(pool: AsyncConnectionPool[Any]) -> Decimal:
    [row] = await f.rows(pool, "SELECT balance FROM payment_methods WHERE id = %s", GIFT)
    return Decimal(row["balance"])


class TestConcurrentCancels:
    async def test_twenty_cancels_with_different_keys_refund_once(
        self, db: AsyncConnectionPool[Any], cancel: BaseTool
    ) -> None:
        runtimes = [
            f.tool_runtime(user_id=SARA, role="customer", turn_id=f"turn_{i}", call_id=f"c{i}")
            for i in range(20)
        ]
        results = await asyncio.gather(*(f.invoke(cancel, CANCEL, rt) for rt in runtimes))
        texts = [f.text_of(r) for r in results]
        succeeded = [t for t in texts if not t.startswith("Error:")]
        assert len(succeeded) == 1
        assert json.loads(succeeded[0])["status"] == "cancelled"
        assert all("only pending orders can be cancelled" in t for t in texts if t not in succeeded)
        refunds = await f.rows(
            db, "SELECT * FROM payment_transactions WHERE transaction_type = 'refund'"
        )
        assert len(refunds) == 1
        assert await gift_balance(db) == Decimal("240.00")
        executions = await f.rows(db, "SELECT ok FROM tool_executions")
        assert sorted(e["ok"] for e in executions) == [False] * 19 + [True]
        assert len(await f.rows(db, "SELECT * FROM audit_log")) == 20


class TestSameCallTwice:
    async def test_same_turn_and_args_execute_once_and_replay(
        self, db: AsyncConnectionPool[Any], cancel: BaseTool
    ) -> None:
        first_rt = f.tool_runtime(user_id=SARA, role="customer", call_id="c1")
        retry_rt = f.tool_runtime(user_id=SARA, role="customer", call_id="c2")
        first = f.text_of(await f.invoke(cancel, CANCEL, first_rt))
        second = f.text_of(await f.invoke(cancel, CANCEL, retry_rt))
        assert first == second
        assert json.loads(first)["status"] == "cancelled"
        assert len(await f.rows(db, "SELECT * FROM tool_executions")) == 1
        assert len(await f.rows(db, "SELECT * FROM audit_log")) == 1
        assert await gift_balance(db) == Decimal("240.00")

    async def test_same_call_in_a_new_turn_is_a_new_write(
        self, db: AsyncConnectionPool[Any], cancel: BaseTool
    ) -> None:
        await f.invoke(cancel, CANCEL, f.tool_runtime(user_id=SARA, role="customer"))
        later = f.tool_runtime(user_id=SARA, role="customer", turn_id="turn_2")
        again = f.text_of(await f.invoke(cancel, CANCEL, later))
        assert again.startswith("Error: order #W0000001 is 'cancelled'")
        assert len(await f.rows(db, "SELECT * FROM tool_executions")) == 2


class TestCrashRepairFindsTheOutcome:
    async def test_key_from_the_checkpointed_call_finds_the_recorded_outcome(
        self, db: AsyncConnectionPool[Any], cancel: BaseTool
    ) -> None:
        raw_args = {"reason": "no longer needed", "order_id": "#W0000001"}
        human = HumanMessage("cancel it", id="h1")
        ai = AIMessage(
            content="",
            tool_calls=[{"name": cancel.name, "args": raw_args, "id": "c1", "type": "tool_call"}],
        )
        rt = f.tool_runtime(user_id=SARA, role="customer", turn_id=None, messages=[human, ai])
        text = f.text_of(await f.invoke(cancel, CANCEL, rt))
        key = idempotency_key(f"{SARA}:s1", "h1", cancel.name, raw_args)
        recorded = await PostgresWriteLedger(db).recorded_result(
            key, name=cancel.name, args=raw_args, customer_id=SARA, observation_format="json"
        )
        assert recorded is not None and recorded[0] == text
