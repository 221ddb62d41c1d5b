"""Thread metadata through the official Python SDK: stored on create, merged on update,
searched and counted (metadata, status, values, sorting) within the caller's own threads,
with `graph_id` and `assistant_id` always there."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError

from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.integration.api_harness import LiveServer
from tests.integration.test_lg_python_sdk import MIA, cancel_order_script, sdk

GRAPH = {"graph_id": "agent", "assistant_id": "94b7579a-afc3-512b-b69b-1b22c5470093"}


@pytest.fixture
async def mia(server: LiveServer, noah: LangGraphClient) -> AsyncIterator[LangGraphClient]:
    client = sdk(server, MIA)
    yield client
    await client.aclose()


def ids(threads: list[Any]) -> list[str]:
    return [t["thread_id"] for t in threads]


class TestStoredAndMerged:
    async def test_create_stores_it_and_update_merges_into_it(self, noah: LangGraphClient) -> None:
        thread = await noah.threads.create(metadata={"channel": "email", "order": "#W1"})
        assert thread["metadata"] == {"channel": "email", "order": "#W1", **GRAPH}
        thread_id = thread["thread_id"]
        updated = await noah.threads.update(thread_id, metadata={"order": "#W2", "topic": "x"})
        assert updated["metadata"] == {"channel": "email", "order": "#W2", "topic": "x", **GRAPH}
        assert (await noah.threads.get(thread_id))["metadata"] == updated["metadata"]
        # the assistant's own keys may be sent as they are, and stay
        same = await noah.threads.update(thread_id, metadata={"graph_id": "agent"})
        assert same["metadata"] == updated["metadata"]

    async def test_the_assistants_keys_cannot_be_changed(self, noah: LangGraphClient) -> None:
        with pytest.raises(UnprocessableEntityError) as refused:
            await noah.threads.create(metadata={"graph_id": "other"})
        assert refused.value.body["error"]["code"] == "metadata_reserved"  # type: ignore[index]
        thread_id = (await noah.threads.create())["thread_id"]
        with pytest.raises(UnprocessableEntityError):
            await noah.threads.update(thread_id, metadata={"assistant_id": "someone"})

    async def test_another_customers_thread_is_not_found(
        self, noah: LangGraphClient, mia: LangGraphClient
    ) -> None:
        thread_id = (await noah.threads.create(metadata={"channel": "web"}))["thread_id"]
        with pytest.raises(NotFoundError):
            await mia.threads.update(thread_id, metadata={"channel": "stolen"})
        assert (await noah.threads.get(thread_id))["metadata"]["channel"] == "web"


class TestSearchAndCount:
    async def test_metadata_finds_only_the_callers_matching_threads(
        self, noah: LangGraphClient, mia: LangGraphClient
    ) -> None:
        email = (await noah.threads.create(metadata={"channel": "email", "vip": True}))["thread_id"]
        web = (await noah.threads.create(metadata={"channel": "web"}))["thread_id"]
        theirs = (await mia.threads.create(metadata={"channel": "email"}))["thread_id"]
        assert ids(await noah.threads.search(metadata={"channel": "email"})) == [email]
        assert ids(await noah.threads.search(metadata={"vip": True})) == [email]
        assert await noah.threads.search(metadata={"vip": 1}) == []  # jsonb: true is not 1
        assert ids(await mia.threads.search(metadata={"channel": "email"})) == [theirs]
        # what Agent Chat UI's history searches by: every thread has them
        found = await noah.threads.search(metadata=GRAPH, limit=100)
        assert set(ids(found)) == {email, web}
        assert await noah.threads.search(metadata={"graph_id": "other"}) == []
        assert await noah.threads.count(metadata={"channel": "email"}) == 1
        assert await noah.threads.count(metadata={"graph_id": "agent"}) == 2
        assert await mia.threads.count() == 1

    async def test_sorting_and_paging_as_the_sdk_sends_them(self, noah: LangGraphClient) -> None:
        made = [
            (await noah.threads.create(thread_id=name, metadata={"batch": "b"}))["thread_id"]
            for name in ("t-b", "t-c", "t-a")
        ]
        by_id = await noah.threads.search(
            metadata={"batch": "b"}, sort_by="thread_id", sort_order="asc"
        )
        assert ids(by_id) == ["t-a", "t-b", "t-c"]
        oldest = await noah.threads.search(
            metadata={"batch": "b"}, sort_by="created_at", sort_order="asc", limit=2, offset=1
        )
        assert ids(oldest) == made[1:]
        by_status = await noah.threads.search(metadata={"batch": "b"}, sort_by="status")
        assert sorted(ids(by_status)) == sorted(made)

    async def test_status_and_values_filter_on_the_threads_state(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(cancel_order_script())
        paused = (await noah.threads.create(metadata={"kind": "t"}))["thread_id"]
        await noah.runs.wait(
            paused, "agent", input={"messages": [{"type": "human", "content": "cancel it"}]}
        )
        model_server.use(Script([Reply.say("Hello.")]))
        idle = (await noah.threads.create(metadata={"kind": "t"}))["thread_id"]
        await noah.runs.wait(
            idle, "agent", input={"messages": [{"type": "human", "content": "hi there"}]}
        )
        kind = {"kind": "t"}
        assert ids(await noah.threads.search(metadata=kind, status="interrupted")) == [paused]
        assert ids(await noah.threads.search(metadata=kind, status="idle")) == [idle]
        assert await noah.threads.count(metadata=kind, status="interrupted") == 1
        said_hi = {"messages": [{"type": "human", "content": "hi there"}]}
        assert ids(await noah.threads.search(values=said_hi)) == [idle]
        assert await noah.threads.count(values=said_hi) == 1
        answered = {"messages": [{"type": "ai", "content": "Hello."}]}
        assert ids(await noah.threads.search(metadata=kind, values=answered)) == [idle]
        assert await noah.threads.search(values={"messages": [{"content": "nobody"}]}) == []
