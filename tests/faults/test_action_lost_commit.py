"""An external write whose answer came back, and whose record's COMMIT reply was lost.

Found by the 90-second soak with external actions (seed 31): `redeem_points` (not
idempotent) was applied by the server and answered; the service stored the answer
(`tool_executions` row `done`), but the reply to that COMMIT was lost, the connection was
cut, and the error went up as "action failed": the customer was told it failed although
it had been done, and recorded as done. Storing the answer is safe to repeat (the first
result stands), so a connection lost under it is retried on a fresh connection and the
customer is told what the server answered.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.actions.calls import Target, write
from app.actions.file import parse_actions
from app.actions.ledger import CallRecord
from app.actions.mcp_source import McpSource
from app.config import Settings
from app.db.pool import open_pool
from tests.chaos.netproxy import NetProxy
from tests.faults import procs
from tests.faults.test_net_blackhole import through
from tests.integration.test_actions import Server

STORED = b"UPDATE tool_executions SET state = 'done'"


@pytest.fixture
def loyalty(tmp_path: Path) -> Iterator[Server]:
    server = Server("mcp", tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy() -> Iterator[NetProxy]:
    with NetProxy(seed=9) as running:
        yield running


def test_a_lost_commit_reply_on_the_stored_answer_is_told_as_the_server_answered(
    private_postgres: procs.PrivatePostgres, proxy: NetProxy, loyalty: Server
) -> None:
    pg = private_postgres
    db = proxy.path("db lost answer commit", ("127.0.0.1", pg.port))
    settings = Settings(  # type: ignore[call-arg]
        database_url=through(db, pg),
        db_prepare_threshold=None,  # statement texts on the wire, as behind PgBouncer
        db_call_deadline_s=2,
        _env_file=None,
    )
    text = f"sources:\n  - name: loyalty\n    mcp: {loyalty.url}/mcp\n    timeout_s: 5\n"
    source = McpSource(parse_actions(text, "test", {}).sources[0])
    key = f"lost-answer-commit-{time.time_ns()}"

    def heal_after_the_lost_reply() -> None:
        deadline = time.monotonic() + 30
        while db.stats.lost_replies == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        db.heal()

    async def call() -> Any:
        pool = await open_pool(settings.database_url or "", settings, name="test")
        await source.open()
        try:
            tool = {t.name: t for t in source.tools()}["redeem_points"]
            record = CallRecord(
                key=key,
                thread_id="c1:lost-answer",
                actor="customer:c1",
                customer_id="c1",
                tool_name="redeem_points",
                arguments={"customer_id": "c1", "points": 7},
            )
            db.lost_reply(match=b"COMMIT", after=STORED)
            healer = threading.Thread(target=heal_after_the_lost_reply, daemon=True)
            healer.start()
            return await write(pool, Target(source, tool, None), record, record.arguments)
        finally:
            await source.close()
            await pool.close()

    observation = asyncio.run(call())
    assert db.stats.lost_replies == 1  # the stored answer's COMMIT went out, its reply did not
    assert observation.content("text").find("Error") == -1, observation.content("text")
    assert pg.query("SELECT state, ok FROM tool_executions WHERE idempotency_key = %s", (key,)) == [
        ("done", True)
    ]
    seen = httpx.get(loyalty.url + "/_seen", timeout=5).json()
    assert [c["key"] for c in seen["seen"] if c["tool"] == "redeem_points"] == [key]
    assert len(seen["applied"]) == 1  # sent once: a not idempotent write is never resent
