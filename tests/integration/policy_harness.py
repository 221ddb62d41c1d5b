"""What the policy tests share: a clean slate of versions (version 1 live, as migrated),
and a model that answers every request and keeps each conversation's system prompts."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from tests.fakellm import ChatRequest, Reply

MARK = "DISTINCT-RULE-42: end every answer with the word pineapple."


async def reset_policies(pool: AsyncConnectionPool[Any]) -> None:
    """Only version 1, live, as the migration left it. Numbers are never reused (a process
    keeps each version's text for its life, as versions never change)."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("DELETE FROM policy_moves")
        await conn.execute("DELETE FROM policy_tests")
        await conn.execute("DELETE FROM policy_events WHERE version > 1 OR actor <> 'migration'")
        await conn.execute("DELETE FROM policy_versions WHERE version > 1")
        await conn.execute(
            "UPDATE policy_versions SET state = 'live', percent = NULL WHERE version = 1"
        )


class PromptRecorder:
    """Says "ok" to everything; keeps the system prompts, by the conversation's first line."""

    def __init__(self) -> None:
        self.prompts: dict[str, list[str]] = defaultdict(list)

    def __call__(self, request: ChatRequest) -> Reply:
        system = next(
            (str(m.get("content")) for m in request.messages if m.get("role") == "system"), ""
        )
        self.prompts[request.first_user_text()].append(system)
        return Reply.say("ok")


async def say(
    client: httpx.AsyncClient, headers: dict[str, str], session: str, text: str
) -> dict[str, Any]:
    posted = await client.post(
        f"/threads/{session}/messages", json={"content": text}, headers=headers
    )
    assert posted.status_code == 200, posted.text
    body: dict[str, Any] = posted.json()
    assert body["status"] == "completed", body
    return body
