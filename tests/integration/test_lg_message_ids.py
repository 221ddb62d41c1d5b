"""One message id from the first streamed piece to the final state, through the official
Python `langgraph-sdk`: what a client that merges chunks by id (as `useStream` does)
relies on. A real uvicorn, real Postgres, the model scripted at its HTTP boundary."""

from __future__ import annotations

import json
from typing import Any

import httpx
from langgraph_sdk.client import LangGraphClient

from tests.fakellm import Latency, Reply, Script, ScriptedModelServer
from tests.integration.api_harness import LiveServer
from tests.integration.test_lg_python_sdk import LONG, PENDING_ORDER, parts

Event = tuple[str, Any, str | None]


def by_id(events: list[Event]) -> dict[str, str]:
    """The streamed text of each message, concatenated by the chunks' ids."""
    texts: dict[str, str] = {}
    for name, data, _ in events:
        if name == "messages":
            chunk = data[0]
            if chunk.get("type") == "AIMessageChunk":
                texts[chunk["id"]] = texts.get(chunk["id"], "") + chunk["content"]
    return texts


def final_messages(events: list[Event]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [e[1] for e in events if e[0] == "values"][-1]["messages"]
    return messages


class TestOneIdPerMessage:
    async def test_a_rejoin_after_a_drop_recovers_the_text_under_the_final_id(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say(LONG)]), latency=Latency(tokens_per_s=40))
        thread_id = (await noah.threads.create())["thread_id"]
        seen: list[Event] = []
        stream = noah.runs.stream(
            thread_id,
            "agent",
            input={"messages": [{"type": "human", "content": "talk"}]},
            stream_mode=["values", "messages-tuple"],
            stream_resumable=True,
        )
        async for part in stream:
            seen.append((part.event, part.data, part.id))
            if sum(e[0] == "messages" for e in seen) >= 3:
                break
        await stream.aclose()  # type: ignore[attr-defined]
        run_id, last_id = seen[0][1]["run_id"], seen[-1][2]
        rest = await parts(noah.runs.join_stream(thread_id, run_id, last_event_id=last_id))
        answer = final_messages(rest)[-1]
        assert answer["content"] == LONG
        # keyed on the final message's id, what was streamed before and after the drop
        assert by_id(seen + rest) == {answer["id"]: LONG}
        state = await noah.threads.get_state(thread_id)
        assert state["values"]["messages"][-1]["id"] == answer["id"]

    async def test_chunks_tool_messages_and_mid_run_values_use_the_stored_ids(
        self, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    Reply.say("Your order is pending."),
                ]
            )
        )
        thread_id = (await noah.threads.create())["thread_id"]
        events = await parts(
            noah.runs.stream(
                thread_id,
                "agent",
                input={"messages": [{"type": "human", "content": "where is my order?"}]},
                stream_mode=["values", "messages-tuple", "updates"],
            )
        )
        stored = (await noah.threads.get_state(thread_id))["values"]["messages"]
        stored_ids = [m["id"] for m in stored]
        assert [m["type"] for m in stored] == ["human", "ai", "tool", "ai"]
        chunk_ids = {e[1][0]["id"] for e in events if e[0] == "messages"}
        assert chunk_ids == set(stored_ids[1:])  # the call, its result, the answer
        assert by_id(events)[stored_ids[-1]] == "Your order is pending."
        for name, data, _ in events:
            if name == "values":  # each step's values is a prefix of the stored state
                ids = [m["id"] for m in data["messages"]]
                assert ids == stored_ids[: len(ids)]
            if name == "updates":
                for update in data.values():
                    assert {m["id"] for m in update["messages"]} <= set(stored_ids)


class TestNativeEvents:
    async def test_tokens_and_tool_events_carry_the_stored_message_ids(
        self, server: LiveServer, noah: LangGraphClient, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call("get_order_details", order_id=PENDING_ORDER),
                    Reply.say("Your order is pending."),
                ]
            )
        )
        thread_id = (await noah.threads.create())["thread_id"]
        headers = server.headers("noah_brown_6181", Accept="text/event-stream")
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
            response = await http.post(
                f"/threads/{thread_id}/messages", json={"content": "where is my order?"}
            )
        body = response.text
        frames = native_events(body)
        stored = (await noah.threads.get_state(thread_id))["values"]["messages"]
        call, result, answer = stored[1], stored[2], stored[3]
        assert [d["message_id"] for n, d in frames if n == "tool_call"] == [call["id"]]
        assert [d["message_id"] for n, d in frames if n == "tool_result"] == [result["id"]]
        tokens = [d for n, d in frames if n == "token"]
        assert {d["message_id"] for d in tokens} == {answer["id"]}
        assert "".join(d["text"] for d in tokens) == answer["content"]


def native_events(body: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if ": " in line and line[0] != ":"
        )
        if "event" in fields:
            out.append((fields["event"], json.loads(fields["data"])))
    return out
