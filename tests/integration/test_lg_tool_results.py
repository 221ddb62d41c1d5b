"""A tool result is whole from its first event on: mid-run `values`, the `messages` chunk
and `tools` carry the same text the final state stores (an order of two items is over
500 characters, where events were cut before), and so does the native `tool_result`."""

from __future__ import annotations

import json

from langgraph_sdk.client import LangGraphClient

from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.integration.api_harness import LiveServer
from tests.integration.test_lg_python_sdk import NOAH, parts

ORDER = "#W7678072"


def lookup() -> Script:
    """An order of two items: over 500 characters of observation."""
    return Script([Reply.call("get_order_details", order_id=ORDER), Reply.say("Here it is.")])


class TestWholeResults:
    async def test_mid_run_values_carry_the_stored_result(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(lookup())
        thread_id = (await noah.threads.create())["thread_id"]
        events = await parts(
            noah.runs.stream(
                thread_id,
                "agent",
                input={"messages": [{"type": "human", "content": "how is my order doing?"}]},
                stream_mode=["values", "messages-tuple", "tools"],
            )
        )
        stored = (await noah.threads.get_state(thread_id))["values"]["messages"]
        (result,) = [m for m in stored if m["type"] == "tool"]
        assert len(result["content"]) > 500  # past the old cut

        mid_run = [e[1] for e in events if e[0] == "values"][:-1]
        seen = [m for v in mid_run for m in v["messages"] if m["type"] == "tool"]
        assert seen and all(m == {**m, "content": result["content"]} for m in seen)
        (chunk,) = [e[1][0] for e in events if e[0] == "messages" and e[1][0]["type"] == "tool"]
        assert chunk["content"] == result["content"]
        (end,) = [e[1] for e in events if e[0] == "tools" and e[1]["event"] == "on_tool_end"]
        assert end["output"]["content"] == result["content"]

    async def test_the_native_tool_result_event_is_whole(
        self, server: LiveServer, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(lookup())
        async with server.client() as client:
            response = await client.post(
                "/threads/whole-1/messages",
                json={"content": "how is my order doing?"},
                headers=server.headers(NOAH, accept="text/event-stream"),
            )
        fields = [
            dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            for block in response.text.replace("\r\n", "\n").split("\n\n")
        ]
        (event,) = [json.loads(f["data"]) for f in fields if f.get("event") == "tool_result"]
        async with server.client() as client:
            state = await client.get("/threads/whole-1/state", headers=server.headers(NOAH))
        (stored,) = [m for m in state.json()["messages"] if m["role"] == "tool"]
        assert len(event["content"]) > 500 and event["content"] == stored["content"]
