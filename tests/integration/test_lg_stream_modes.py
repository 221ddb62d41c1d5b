"""The `messages` and `tools` stream modes as the official server sends them, and the
modes cs-agent does not send refused by name, through the official Python SDK."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import UnprocessableEntityError

from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.integration.test_lg_python_sdk import PENDING_ORDER, cancel_order_script, parts


def lookup_script() -> Script:
    return Script(
        [
            Reply.call("get_order_details", order_id=PENDING_ORDER),
            Reply.say("Your order is pending."),
        ]
    )


async def stream(
    client: LangGraphClient, thread_id: str, modes: list[str], **kwargs: Any
) -> list[tuple[str, Any, str | None]]:
    return await parts(client.runs.stream(thread_id, "agent", stream_mode=modes, **kwargs))


ASK = {"input": {"messages": [{"type": "human", "content": "where is my order?"}]}}


class TestMessagesMode:
    async def test_metadata_then_the_message_so_far_then_the_whole_tool_message(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(lookup_script())
        thread_id = (await noah.threads.create())["thread_id"]
        events = await stream(noah, thread_id, ["messages"], **ASK)
        stored = (await noah.threads.get_state(thread_id))["values"]["messages"]
        call, result, answer = stored[1], stored[2], stored[3]
        names = {e[0] for e in events}
        assert names == {"metadata", "messages/metadata", "messages/partial", "messages/complete"}

        metadata = [e[1] for e in events if e[0] == "messages/metadata"]
        assert [next(iter(m)) for m in metadata] == [call["id"], result["id"], answer["id"]]
        assert metadata[0][call["id"]]["metadata"]["langgraph_node"] == "agent"
        assert metadata[1][result["id"]]["metadata"]["langgraph_node"] == "read_tools"

        for message_id in (call["id"], result["id"], answer["id"]):  # metadata comes first
            first = next(i for i, e in enumerate(events) if message_id in _ids(e))
            assert events[first][0] == "messages/metadata"

        partials = [e[1][0] for e in events if e[0] == "messages/partial"]
        assert all(p["type"] == "ai" for p in partials)
        (call_partial,) = [p for p in partials if p["id"] == call["id"]]
        assert [c["name"] for c in call_partial["tool_calls"]] == ["get_order_details"]
        answer_partials = [p["content"] for p in partials if p["id"] == answer["id"]]
        assert answer_partials[-1] == answer["content"] == "Your order is pending."
        assert all(answer["content"].startswith(text) for text in answer_partials)

        (complete,) = [e[1] for e in events if e[0] == "messages/complete"]
        assert complete[0]["type"] == "tool" and complete[0]["id"] == result["id"]
        assert complete[0]["tool_call_id"] == call["tool_calls"][0]["id"]


def _ids(event: tuple[str, Any, str | None]) -> set[str]:
    name, data, _ = event
    if name == "messages/metadata":
        return set(data)
    if name.startswith("messages/"):
        return {m["id"] for m in data}
    return set()


class TestToolsMode:
    async def test_a_read_starts_and_ends_with_its_call_id_input_and_result(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(lookup_script())
        thread_id = (await noah.threads.create())["thread_id"]
        events = await stream(noah, thread_id, ["tools"], **ASK)
        stored = (await noah.threads.get_state(thread_id))["values"]["messages"]
        (call,) = stored[1]["tool_calls"]
        tools = [e[1] for e in events if e[0] == "tools"]
        assert [t["event"] for t in tools] == ["on_tool_start", "on_tool_end"]
        start, end = tools
        assert start == {
            "event": "on_tool_start",
            "toolCallId": call["id"],
            "name": "get_order_details",
            "input": {"order_id": PENDING_ORDER},
        }
        assert end["toolCallId"] == call["id"] and end["name"] == "get_order_details"
        assert end["output"]["id"] == stored[2]["id"]
        assert end["output"]["tool_call_id"] == call["id"]

    async def test_a_confirmed_write_starts_in_the_run_that_approves_it(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(cancel_order_script())
        thread_id = (await noah.threads.create())["thread_id"]
        asked = await stream(
            noah,
            thread_id,
            ["tools", "values"],
            input={"messages": [{"type": "human", "content": "cancel my order"}]},
        )
        assert not [e for e in asked if e[0] == "tools"]  # waiting for the yes: not started
        model_server.use(Script([Reply.say("Done: your order is cancelled.")]))
        approved = await stream(
            noah,
            thread_id,
            ["tools"],
            command={"resume": {"decisions": [{"type": "approve"}]}},
        )
        tools = [e[1] for e in approved if e[0] == "tools"]
        assert [t["event"] for t in tools] == ["on_tool_start", "on_tool_end"]
        assert tools[0]["name"] == "cancel_pending_order"
        assert tools[0]["input"]["order_id"] == PENDING_ORDER
        assert tools[1]["toolCallId"] == tools[0]["toolCallId"]


class TestRefusedModes:
    @pytest.mark.parametrize("mode", ["events", "debug", "tasks", "checkpoints"])
    async def test_a_mode_that_is_not_sent_is_refused_by_name_and_runs_nothing(
        self, noah: LangGraphClient, mode: str
    ) -> None:
        thread_id = (await noah.threads.create())["thread_id"]
        with pytest.raises(UnprocessableEntityError) as refused:
            await noah.runs.create(thread_id, "agent", stream_mode=["values", mode], **ASK)
        error = refused.value.body["error"]  # type: ignore[index]
        assert error["code"] == "stream_mode_unsupported"
        assert mode in error["message"]
        assert await noah.runs.list(thread_id) == []
