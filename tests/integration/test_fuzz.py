"""Schemathesis against the real app over real HTTP, signed in as a customer: no 5xx, ever.

The run is bounded in time (`FUZZ_SECONDS`, phases repeat until it is spent) and seeded
(`FUZZ_SEED`). Path, query and body values are drawn, part of the time, from dictionaries of
values that reach past the 404: the session id of a thread that exists, its checkpoint and
message ids, and a few known-hostile strings. A failure prints schemathesis's report, with a
curl command that reproduces each 5xx.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.help.repository import sync_help_articles
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer

FUZZ_SECONDS = 60
FUZZ_SEED = 18
EXAMPLES_PER_ROUND = 25
NOAH = "noah_brown_6181"
SESSION = "fuzzed"
# Known-hostile strings, tried beside whatever hypothesis makes up.
HOSTILE = ["\x00", "a\x00b", "\ud7ff\ue000", "%00", "../../etc/passwd", "' OR 1=1 --", "🦜" * 40]
SCHEMATHESIS = str(Path(sys.executable).with_name("schemathesis"))


def toml_string(value: str) -> str:
    # a JSON string is a TOML basic string, once non-ASCII stays as it is (TOML has no
    # surrogate escapes)
    return json.dumps(value, ensure_ascii=False)


def dictionary(name: str, values: list[str]) -> str:
    return f"[dictionaries.{name}]\nvalues = [{', '.join(map(toml_string, values))}]\n"


def binding(name: str, probability: float) -> str:
    return f'{{ dictionary = "{name}", probability = {probability} }}'


def fuzz_config(checkpoints: list[str], messages: list[str]) -> str:
    thread_routes = r"^/threads/\{session_id\}/(state|history|rewind|messages|resume)$"
    model_routes = r"^/threads/\{session_id\}/(messages|resume)$"
    return "\n".join(
        [
            dictionary("session", [SESSION]),
            dictionary("checkpoint", [*checkpoints, *HOSTILE]),
            dictionary("message", [*messages, *HOSTILE]),
            dictionary("text", ["where is my order #W2611340?", "refunds", *HOSTILE]),
            "[parameters]",
            f'"query.q" = {binding("text", 0.3)}',
            f'"query.cursor" = {binding("text", 0.3)}',
            f'"query.checkpoint_id" = {binding("checkpoint", 0.5)}',
            f'"query.before" = {binding("checkpoint", 0.5)}',
            f'"body.checkpoint_id" = {binding("checkpoint", 0.5)}',
            f'"body.message_id" = {binding("message", 0.5)}',
            f'"body.content" = {binding("text", 0.3)}',
            "",
            # a thread that exists, so the fuzzed values reach the inspector and the runs
            "[[operations]]",
            f"include-path-regex = {toml_string(thread_routes)}",
            f'parameters = {{ "path.session_id" = {binding("session", 0.8)} }}',
            "",
            # each message is a turn of the (demo) model: a few per round are enough
            "[[operations]]",
            f"include-path-regex = {toml_string(model_routes)}",
            "generation = { max-examples = 5 }",
            "",
        ]
    )


@pytest.fixture(scope="module")
def server(database_url: str) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url,
        _env_file=None,
        demo_model_tokens_per_s=100_000,  # the demo model answers at once
        # the fuzzer is one client sending thousands of requests: no limits or budget here
        rate_limit_posts_per_minute=0,
        rate_limit_threads_per_hour=0,
        rate_limit_public_per_minute=0,
        rate_limit_auth_per_minute=0,
        token_budget_per_day=0,
    )
    live = LiveServer(settings, model=None).start()  # the demo model: no script to run out
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture
async def seeded_thread(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> tuple[list[str], list[str]]:
    """The fuzzed customer's shop data and one thread with two turns; its checkpoint and
    message ids."""
    await load_small_shop(db)
    await sync_help_articles(db)
    headers = server.headers(NOAH)
    async with server.client() as client:
        for content in ("where is my order #W2611340?", "how long do refunds take?"):
            posted = await client.post(
                f"/threads/{SESSION}/messages", json={"content": content}, headers=headers
            )
            assert posted.status_code == 200, posted.text
        history = (await client.get(f"/threads/{SESSION}/history", headers=headers)).json()
        state = (await client.get(f"/threads/{SESSION}/state", headers=headers)).json()
    checkpoints = [item["checkpoint_id"] for item in history["items"] if item["checkpoint_id"]]
    messages = [m["id"] for m in state["messages"] if m["id"]]
    assert checkpoints and messages
    return checkpoints, messages


class TestFuzz:
    def test_no_operation_answers_5xx(
        self, server: LiveServer, seeded_thread: tuple[list[str], list[str]], tmp_path: Path
    ) -> None:
        config = tmp_path / "schemathesis.toml"
        config.write_text(fuzz_config(*seeded_thread))
        token = server.token(NOAH, ttl_s=3600)
        command = [
            SCHEMATHESIS,
            "--config-file",
            str(config),
            "run",
            f"{server.url}/openapi.json",
            "--header",
            f"Authorization: Bearer {token}",
            "--checks",
            "not_a_server_error",
            "--seed",
            str(FUZZ_SEED),
            "--max-time",
            str(FUZZ_SECONDS),
            "--max-examples",
            str(EXAMPLES_PER_ROUND),
            "--workers",
            "1",
            "--generation-database",
            "none",
            "--request-timeout",
            "20",
            "--no-color",
        ]
        run = subprocess.run(
            command,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=FUZZ_SECONDS + 120,
            check=False,
        )
        report = run.stdout[-20_000:] + run.stderr[-5_000:]
        assert run.returncode == 0, report
        assert "Server error" not in run.stdout, report
        assert httpx.get(f"{server.url}/healthz").status_code == 200
