"""What a run asks to be tagged with is kept, as the official server keeps it: a run's
`metadata` is on the run (with the assistant's keys, which a client cannot change), and a
run that creates its thread (`if_not_exists="create"`) gives the new thread its metadata."""

from __future__ import annotations

import uuid

import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import UnprocessableEntityError

from tests.fakellm import Reply, Script, ScriptedModelServer

ASK = {"input": {"messages": [{"type": "human", "content": "hello"}]}}


class TestRunMetadata:
    async def test_a_runs_metadata_is_kept_on_the_run(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Hi."), Reply.say("Again.")]))
        thread_id = (await noah.threads.create(metadata={"topic": "returns"}))["thread_id"]
        tag = {"channel": "web", "order": {"id": 7}}
        created = await noah.runs.create(thread_id, "agent", metadata=tag, **ASK)
        assert created["metadata"]["channel"] == "web"
        await noah.runs.join(thread_id, created["run_id"])
        await noah.runs.wait(thread_id, "agent", **ASK)  # a run without metadata

        tagged, plain = (await noah.runs.list(thread_id))[::-1]
        assert tagged["metadata"] == {
            "created_by": "system",
            "channel": "web",
            "order": {"id": 7},
            "graph_id": "agent",
            "assistant_id": tagged["assistant_id"],
        }
        assert (await noah.runs.get(thread_id, tagged["run_id"]))["metadata"] == tagged["metadata"]
        assert "channel" not in plain["metadata"]
        thread = await noah.threads.get(thread_id)
        assert thread["metadata"]["topic"] == "returns" and "channel" not in thread["metadata"]

    async def test_a_run_that_creates_its_thread_gives_it_the_runs_metadata(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Hi.")]))
        thread_id = str(uuid.uuid4())
        await noah.runs.wait(
            thread_id, "agent", if_not_exists="create", metadata={"channel": "sms"}, **ASK
        )
        thread = await noah.threads.get(thread_id)
        assert thread["metadata"]["channel"] == "sms"
        assert thread["metadata"]["graph_id"] == "agent"
        found = await noah.threads.search(metadata={"channel": "sms"})
        assert [t["thread_id"] for t in found] == [thread_id]

    async def test_metadata_naming_another_assistant_or_too_large_is_refused(
        self, noah: LangGraphClient
    ) -> None:
        thread_id = (await noah.threads.create())["thread_id"]
        for metadata in ({"assistant_id": "someone-else"}, {"blob": "x" * 20_000}):
            with pytest.raises(UnprocessableEntityError):
                await noah.runs.create(thread_id, "agent", metadata=metadata, **ASK)
        assert await noah.runs.list(thread_id) == []
