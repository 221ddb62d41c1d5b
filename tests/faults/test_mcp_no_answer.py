"""An MCP write whose answer never comes is an unknown outcome, never a failure.

Found by the chaos soak (docs/chaos.md, external actions): lost replies on a replica's
path to the MCP server made `redeem_points` (not idempotent) read as "failed to handle the
request": the customer was told it failed while the server had applied it, and nobody was
asked to check. Every call of a source shares one MCP session; the first call that timed
out dropped it, and the SDK ended each other call in flight with `MCPError(CONNECTION_
CLOSED)`, which the source took for an error the server answered with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.actions.file import parse_actions
from app.actions.mcp_source import McpSource
from app.actions.remote import NoAnswer
from tests.integration.test_actions import Server

TIMEOUT_S = 1.0


@pytest.fixture
def loyalty(tmp_path: Path) -> Iterator[Server]:
    server = Server("mcp", tmp_path)
    server.start()
    yield server
    server.stop()


def test_two_mcp_writes_in_flight_whose_answers_never_come_are_both_no_answer(
    loyalty: Server,
) -> None:
    text = f"sources:\n  - name: loyalty\n    mcp: {loyalty.url}/mcp\n    timeout_s: {TIMEOUT_S}\n"
    source = McpSource(parse_actions(text, "test", {}).sources[0])

    async def one(key: str, after_s: float) -> BaseException | None:
        await asyncio.sleep(after_s)
        tool = {t.name: t for t in source.tools()}["redeem_points"]
        try:
            await source.call(tool, {"customer_id": "c1", "points": 5}, key=key, token=None)
        except NoAnswer as error:
            return error
        return None

    async def calls() -> list[BaseException | None]:
        await source.open()
        loyalty.mode("hold")  # applied, then never answered
        try:
            # The first one's timeout drops the shared session under the second.
            return await asyncio.gather(one("k1", 0.0), one("k2", TIMEOUT_S / 3))
        finally:
            loyalty.mode("normal")
            await source.close()

    outcomes = asyncio.run(calls())
    assert sorted(a["key"] for a in loyalty.applied()) == ["k1", "k2"]  # both ran
    # Neither may read as answered ("failed"): the customer would be told so.
    assert [type(o).__name__ for o in outcomes] == ["NoAnswer", "NoAnswer"]
