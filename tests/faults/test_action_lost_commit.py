"""An external write that was sent, and a step of its ledger whose COMMIT reply was lost.

Found by the soak with external actions. In the 90-second run (seed 31) `redeem_points`
(not idempotent) was applied and answered; the service stored the answer (`tool_executions`
row `done`), but the reply to that COMMIT was lost, the connection was cut, and the error
went up as "action failed": the customer was told it failed although it had been done. In
the 30-minute run (seed 7), twice, `issue_voucher` (idempotent) got no answer, and the
COMMIT of the count of its resend lost its reply: "action failed" again, for a voucher the
server had issued. Each ledger step after a send is safe to take again, so a connection
lost under one is tried again on a fresh connection.
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
RESENT = b"UPDATE tool_executions SET attempts = attempts + 1"


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


@pytest.mark.parametrize(
    ("tool", "step"),
    [("redeem_points", STORED), ("issue_voucher", RESENT)],
    ids=["stored", "resent"],
)
def test_a_lost_commit_reply_on_a_ledger_step_is_told_as_the_server_answered(
    private_postgres: procs.PrivatePostgres,
    proxy: NetProxy,
    loyalty: Server,
    tool: str,
    step: bytes,
) -> None:
    pg = private_postgres
    db = proxy.path(f"db lost commit {tool}", ("127.0.0.1", pg.port))
    settings = Settings(  # type: ignore[call-arg]
        database_url=through(db, pg),
        db_prepare_threshold=None,  # statement texts on the wire, as behind PgBouncer
        db_call_deadline_s=2,
        _env_file=None,
    )
    text = f"sources:\n  - name: loyalty\n    mcp: {loyalty.url}/mcp\n    timeout_s: 1\n"
    source = McpSource(parse_actions(text, "test", {}).sources[0])
    key = f"lost-commit-{tool}-{time.time_ns()}"
    resent = step == RESENT
    if resent:  # the first send is applied and never answered: the voucher is resent
        loyalty.mode("hold")

    def heal_after_the_lost_reply() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if resent and loyalty_seen(loyalty)["seen"]:
                loyalty.mode("normal")  # the held call stays held; the resend is answered
            if db.stats.lost_replies:
                break
            time.sleep(0.01)
        db.heal()

    async def call() -> Any:
        pool = await open_pool(settings.database_url or "", settings, name="test")
        await source.open()
        try:
            remote = {t.name: t for t in source.tools()}[tool]
            arguments = {"customer_id": "c1", "points" if tool == "redeem_points" else "amount": 7}
            record = CallRecord(
                key=key,
                thread_id=f"c1:{key}",
                actor="customer:c1",
                customer_id="c1",
                tool_name=tool,
                arguments=arguments,
            )
            db.lost_reply(match=b"COMMIT", after=step)
            healer = threading.Thread(target=heal_after_the_lost_reply, daemon=True)
            healer.start()
            return await write(pool, Target(source, remote, None), record, arguments)
        finally:
            await source.close()
            await pool.close()

    try:
        observation = asyncio.run(call())
    finally:
        loyalty.mode("normal")
    assert db.stats.lost_replies == 1  # the step's COMMIT went out, its reply did not
    assert observation.content("text").find("Error") == -1, observation.content("text")
    assert pg.query("SELECT state, ok FROM tool_executions WHERE idempotency_key = %s", (key,)) == [
        ("done", True)
    ]
    seen = loyalty_seen(loyalty)
    assert {c["key"] for c in seen["seen"]} == {key}
    assert len(seen["applied"]) == 1  # applied once, however many times it was sent


def loyalty_seen(server: Server) -> dict[str, Any]:
    seen: dict[str, Any] = httpx.get(server.url + "/_seen", timeout=5).json()
    return seen
