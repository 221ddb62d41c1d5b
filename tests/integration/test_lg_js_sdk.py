"""The official JS client and its React `useStream` hook against cs-agent's `/lg` surface:
node runs tests/js/roundtrip.mjs and vitest runs tests/js/use-stream.test.jsx (jsdom +
@testing-library/react), each against a real uvicorn and the scripted model. The packages
are pinned in tests/js/package-lock.json and installed by `make js-deps`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from tests.fakellm import Latency, Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import fetch_one, load_small_shop
from tests.integration.api_harness import LiveServer

JS_DIR = Path(__file__).resolve().parents[1] / "js"
NOAH, MIA = "noah_brown_6181", "mia_garcia_4516"
PENDING_ORDER = "#W2611340"
LONG = " ".join(f"word{i}" for i in range(60))
FINAL = "Done: your order is cancelled and the refund is on its way to your card."


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "node is not installed: install nodejs and npm (Debian: apt-get install nodejs npm)"
        )
    if not (JS_DIR / "node_modules" / "@langchain" / "langgraph-sdk").is_dir():
        pytest.fail(
            "the JS test packages are not installed: run `make js-deps` (npm ci in tests/js)"
        )
    return node


@pytest.fixture
async def shop(db: AsyncConnectionPool[Any]) -> AsyncConnectionPool[Any]:
    await load_small_shop(db)
    return db


def _run(
    command: list[str], server: LiveServer, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LG_URL": f"{server.url}/lg",
        "LG_TOKEN": server.token(NOAH),
        "LG_OTHER_TOKEN": server.token(MIA),
        "NO_COLOR": "1",
    }
    done = subprocess.run(
        command, cwd=JS_DIR, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return done


class TestJsClient:
    def test_the_js_client_does_the_round_trip(
        self, server: LiveServer, model_server: ScriptedModelServer, shop: AsyncConnectionPool[Any]
    ) -> None:
        node = _node()
        model_server.use(
            Script(
                [
                    Reply.call(
                        "cancel_pending_order", order_id=PENDING_ORDER, reason="ordered by mistake"
                    ),
                    Reply.say("Done: your order is cancelled."),
                    Reply.say("Your orders are on their way."),
                    Reply.say(LONG),  # the dropped and rejoined stream
                    Reply.say(LONG),  # the cancelled run
                ]
            ),
            latency=Latency(tokens_per_s=100),
        )
        done = _run([node, "roundtrip.mjs"], server, timeout_s=120)
        assert '"ok":true' in done.stdout

    async def test_the_write_it_approved_was_done_once(
        self, server: LiveServer, model_server: ScriptedModelServer, shop: AsyncConnectionPool[Any]
    ) -> None:
        node = _node()
        model_server.use(
            Script(
                [
                    Reply.call(
                        "cancel_pending_order", order_id=PENDING_ORDER, reason="ordered by mistake"
                    ),
                    Reply.say(FINAL),
                ]
            ),
            latency=Latency(tokens_per_s=30),
        )
        vitest = str(JS_DIR / "node_modules" / "vitest" / "vitest.mjs")
        _run([node, vitest, "run", "--reporter=verbose"], server, timeout_s=180)
        row = await fetch_one(shop, "SELECT status FROM orders WHERE id = %s", PENDING_ORDER)
        assert row["status"] == "cancelled"
        executed = await fetch_one(
            shop,
            "SELECT count(*) AS n FROM tool_executions WHERE tool_name = 'cancel_pending_order'",
        )
        assert executed["n"] == 1
